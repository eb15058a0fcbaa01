package httpapi

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/taskhoster/taskhoster/app"
	"github.com/taskhoster/taskhoster/domain"
)

// taskRequest is the body of every call a worker makes about one task:
// progress and result (SPEC §3), heartbeat, release and fail (SPEC §11).
// Each call reads the fields it needs and ignores the others, so that a
// client may send one envelope to every call; a field no call has is
// refused (readJSON), naming it.
type taskRequest struct {
	Worker   *string         `json:"worker"`
	Progress json.RawMessage `json:"progress"`
	Result   json.RawMessage `json:"result"`
	Delay    *float64        `json:"delay"`
	Reason   json.RawMessage `json:"reason"`
	// Attempt, when given, is the claim's attempts the caller holds: a
	// report of an older claim by the same worker is then refused.
	Attempt *int `json:"attempt"`
}

// holder is who req says reports: worker, in req's attempt if it names one.
func (req taskRequest) holder(worker string) domain.Holder {
	h := domain.Holder{Worker: worker}
	if req.Attempt != nil {
		// The claim reply told the worker its attempts, not its notBefore.
		h.Attempt, h.AnyNotBefore = *req.Attempt, true
	}
	return h
}

// taskCall is one of those calls: its name (the last path segment) and the
// use case it runs for the worker.
type taskCall struct {
	name string
	do   func(svc *app.Service, ctx context.Context, q *domain.Queue, id, worker string, req taskRequest) (app.Outcome, error)
}

var (
	progressCall = taskCall{"progress", func(svc *app.Service, ctx context.Context, q *domain.Queue, id, worker string, req taskRequest) (app.Outcome, error) {
		if req.Progress == nil {
			return app.Outcome{}, missingField("progress")
		}
		return svc.Progress(ctx, q, id, req.holder(worker), req.Progress)
	}}
	resultCall = taskCall{"result", func(svc *app.Service, ctx context.Context, q *domain.Queue, id, worker string, req taskRequest) (app.Outcome, error) {
		if req.Result == nil {
			return app.Outcome{}, missingField("result")
		}
		return svc.Result(ctx, q, id, worker, req.Result)
	}}
	heartbeatCall = taskCall{"heartbeat", func(svc *app.Service, ctx context.Context, q *domain.Queue, id, worker string, req taskRequest) (app.Outcome, error) {
		return svc.Heartbeat(ctx, q, id, req.holder(worker))
	}}
	releaseCall = taskCall{"release", func(svc *app.Service, ctx context.Context, q *domain.Queue, id, worker string, req taskRequest) (app.Outcome, error) {
		delay, err := seconds("delay", req.Delay, domain.MaxDelaySeconds)
		if err != nil {
			return app.Outcome{}, err
		}
		return svc.Release(ctx, q, id, req.holder(worker), delay, req.Reason)
	}}
	failCall = taskCall{"fail", func(svc *app.Service, ctx context.Context, q *domain.Queue, id, worker string, req taskRequest) (app.Outcome, error) {
		return svc.Fail(ctx, q, id, worker, req.Reason)
	}}
)

func missingField(name string) error {
	return domain.E(domain.KindInvalid, domain.CodeInvalidRequest, "body needs a %q field", name)
}

// onTask serves POST /{queue}/{id}/{call.name}: the same access (work), body
// limit, worker default and reply for every call a worker makes about a task.
func (a *API) onTask(call taskCall) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := queueOf(r)
		user, err := a.authorize(r, domain.ActionWork)
		if err != nil {
			a.writeError(w, r, err)
			return
		}
		var req taskRequest
		if err := readJSON(w, r, q.Settings.MaxItemBytes+envelopeSlack, &req); err != nil {
			a.writeError(w, r, err)
			return
		}
		worker, err := workerName(req.Worker, user)
		if err != nil {
			a.writeError(w, r, err)
			return
		}
		id := chi.URLParam(r, "id")
		if !domain.ValidID(id) {
			a.writeError(w, r, errNotFound)
			return
		}
		out, err := call.do(a.svc, r.Context(), q, id, worker, req)
		if err != nil {
			a.writeError(w, r, notFoundAsTask(err))
			return
		}
		writeJSON(w, http.StatusOK, OutcomeView(call.name, out))
	}
}

// OutcomeView is the answer to a worker's call about a task (SPEC §3, §11):
// refused with the task's status; accepted with the extended lease (progress,
// heartbeat), with the status it went to (release), or bare (result, fail).
func OutcomeView(call string, out app.Outcome) map[string]any {
	switch {
	case !out.Accepted:
		return map[string]any{"accepted": false, "status": out.Status}
	case call == "release":
		return map[string]any{"accepted": true, "status": out.Status}
	case out.Lease != nil:
		return map[string]any{"accepted": true, "lease": out.Lease}
	}
	return map[string]any{"accepted": true}
}
