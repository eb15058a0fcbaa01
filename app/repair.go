package app

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/domain/tasklog"
)

// Repairing the event log at start-up.
//
// A transition is written to the store first and to the event log second:
// the repository writes the task file outside the queue's lock and, once
// it is stored, indexes it and has the line appended under the lock (see
// transition). Neither is flushed before the answer. So a crash can leave
// stored changes without their lines: those whose file writes were under
// way when it struck. Such a change was decided (and stamped with its time)
// at most as long before the queue's newest change as its write took, a
// few milliseconds, and a write that outlasts repairRecent is not looked
// for. RepairLog finds these changes and appends the lines they lack, so
// that the log tells the store's story again before anyone is served.
//
// The candidates of a queue are
//   - the tasks whose c(T) = max(updatedAt, fetchedAt) is no more than
//     repairRecent older than the queue's newest one: every transition but
//     a clean stamps one of the two with its time;
//   - and the delete of a clean, which leaves no task to look at. If the
//     queue's last line is of a task the store no longer holds, and is not
//     its cleaned line, that clean was cut. (The sweep cleans one task at a
//     time, so at most one clean is cut; when other lines of the queue
//     were appended after it, it is not found.)
//
// Both are found with one bounded pass over the newest lines of the log,
// which ends once it has met each queue's last line and each candidate's.

// LogTail reads the event log backwards: every line, newest day file
// first, newest line first, until fn returns false. A line is valid only
// during the call. eventlog.Reader implements it.
type LogTail interface {
	Backwards(ctx context.Context, fn func(line []byte) bool) error
}

// The repair's bounds. A cut transition happened just before the crash,
// so its line would be among the last ones written: the pass reads back
// repairWindow from the newest line, which leaves ample room for lines of
// different queues being appended slightly out of time order, and never
// more than repairMaxBytes of the log, so a start-up after a crash costs
// at most a fraction of a second however big and busy the log is.
const (
	repairWindow   = time.Hour
	repairMaxBytes = 64 << 20
	// repairRecent is how much older than its queue's newest change a cut
	// change may be: the longest a task file write may take.
	repairRecent = 10 * time.Second
	// repairMaxRecent bounds the candidates of a queue, newest first.
	// Far more changes than writes can be under way at once.
	repairMaxRecent = 100_000
)

// RepairLog appends the lines a crash cut, for the served queues, and
// returns the events it appended (none when the log and the store agree, as
// after a clean stop). It must run before the service serves anything: it
// assumes no transition runs beside it. Running it again appends nothing.
//
// setAside are the tasks whose files this start found corrupt and moved
// aside (ReportCorrupt): gone from the store without a clean, so none of
// them is taken for one whose cleaned line was cut. Their failed lines are
// written after the repair, not before: the repair judges the log as the
// crash left it, and a line stamped now would move its window past the
// crash when the restart comes more than repairWindow later.
func (s *Service) RepairLog(ctx context.Context, queues []*domain.Queue, tail LogTail, setAside []domain.Key) ([]domain.Event, error) {
	newest := make(map[domain.QueueRef][]domain.Task, len(queues))
	for _, q := range queues {
		ts, err := s.recentChanges(ctx, q.Ref())
		if err != nil {
			return nil, err
		}
		newest[q.Ref()] = ts
	}
	read, err := readTail(ctx, tail, newest, s.clock.Now())
	if err != nil {
		return nil, fmt.Errorf("repair event log: %w", err)
	}

	var appended []domain.Event
	for _, q := range queues {
		cleaned, err := s.cutClean(ctx, q, read, setAside)
		if err != nil {
			return appended, err
		}
		for _, ev := range append(s.cutChanges(q, newest[q.Ref()], read), cleaned...) {
			if err := s.log.Append(ctx, ev, q.Settings.ArchivePayloads); err != nil {
				return appended, fmt.Errorf("repair event log: %s of %s: %w", ev.Kind, ev.Task.ID, err)
			}
			appended = append(appended, ev)
			s.logger.Warn("event log repaired: appended the line a crash cut",
				zap.String("event", string(ev.Kind)), zap.String("id", ev.Task.ID),
				zap.String("host", q.Host), zap.String("queue", q.Name),
				zap.Time("at", ev.At), zap.String("worker", ev.Worker))
		}
	}
	// Metrics and watchers are not told: the transitions are not new, and
	// this process has neither counted nor shown them. The lines are made
	// durable at once, so that a second crash does not cut them again.
	if len(appended) > 0 {
		if err := s.syncer.Sync(ctx); err != nil {
			return appended, fmt.Errorf("repair event log: %w", err)
		}
	}
	return appended, nil
}

// cutChanges are the lines q's recent changes lack, if any.
func (s *Service) cutChanges(q *domain.Queue, newest []domain.Task, read *tailRead) []domain.Event {
	var evs []domain.Event
	unread := 0 // candidates whose lines lie beyond what the pass may read
	defer func() {
		if unread > 0 {
			s.logger.Warn("event log not repaired: the newest lines of some recently changed tasks are too many to read",
				zap.String("host", q.Host), zap.String("queue", q.Name), zap.Int("tasks", unread))
		}
	}()
	for _, t := range newest {
		warn := func(msg string) {
			s.logger.Warn("event log not repaired: "+msg, zap.String("host", q.Host),
				zap.String("queue", q.Name), zap.String("id", t.ID), zap.String("status", string(t.Status)))
		}
		if changedAt(t) < read.floor {
			// The last crash cut no change this old (see readTail); if
			// its lines are missing, they aged out.
			continue
		}
		line, found := read.last[domain.KeyOf(t)]
		switch {
		case found && agrees(line, t):
			continue
		case !found && !read.covered:
			unread++
			continue
		}
		ev, ok := missingEvent(t, line, found)
		switch {
		case !ok:
			warn("cannot tell which event the stored task lacks")
			continue
		case !found && read.complete && ev.Kind != domain.EventPosted:
			// A crash cuts a task's last line, not its whole history: a
			// whole log without one line of a task that went past its
			// post never had them (a new or emptied logs folder).
			warn("it holds no line of the stored task at all")
			continue
		}
		evs = append(evs, ev)
	}
	// In the order they happened, as they would have been written.
	slices.SortStableFunc(evs, func(a, b domain.Event) int { return a.At.Compare(b.At) })
	return evs
}

// changedAt is c(T): when t last changed, to the millisecond.
func changedAt(t domain.Task) int64 {
	if t.FetchedAt != nil && *t.FetchedAt > t.UpdatedAt {
		return *t.FetchedAt
	}
	return t.UpdatedAt
}

// recentChanges lists the tasks of q whose c(T) is at most repairRecent
// older than the newest, newest first, up to repairMaxRecent of them: one
// pass over the three state directories.
func (s *Service) recentChanges(ctx context.Context, q domain.QueueRef) ([]domain.Task, error) {
	var recent []domain.Task
	var newest int64
	// prune keeps the candidates of the newest changes seen so far.
	prune := func() {
		slices.SortFunc(recent, func(a, b domain.Task) int { return cmp.Compare(changedAt(b), changedAt(a)) })
		recent = slices.DeleteFunc(recent, func(t domain.Task) bool {
			return changedAt(t) < newest-repairRecent.Milliseconds()
		})
		recent = recent[:min(len(recent), repairMaxRecent)]
	}
	for _, st := range domain.Stages {
		err := s.repo.Each(ctx, q, st, func(t domain.Task) bool {
			c := changedAt(t)
			if c < newest-repairRecent.Milliseconds() {
				return true
			}
			newest = max(newest, c)
			if recent = append(recent, t); len(recent) >= 2*repairMaxRecent {
				prune()
			}
			return true
		})
		if err != nil {
			return nil, fmt.Errorf("repair event log: %w", err)
		}
	}
	prune()
	return recent, nil
}

// seenLine is what the repair keeps of a task's newest line.
type seenLine struct {
	at       int64 // milliseconds
	event    domain.EventKind
	status   domain.Status
	attempts int
	worker   string
	errCode  string // a failed line's "error"
	errBytes int64  // its "bytes.error": the size of the task's failure, if any
}

// tailRead is what one backward pass over the log found.
type tailRead struct {
	// floor is repairWindow before the newest line (before now, if the log
	// has none). A change older than that was not cut by the last crash.
	floor int64
	// covered says every line from floor on was read, or the whole log;
	// complete says the whole log was. A candidate no older than floor
	// without a line in a covered read has lost its last one.
	covered, complete bool
	// last is the newest line of each candidate that has one.
	last map[domain.Key]seenLine
	// queueLast is each served queue's newest line, if it is no older than
	// floor, and the task it is of.
	queueLast map[domain.QueueRef]taskLine
}

type taskLine struct {
	key  domain.Key
	line seenLine
}

// readTail makes the one backward pass over the log, for the queues of
// newest (with their candidates, the recently changed tasks).
//
// A queue's cut change was made just before the crash: no earlier than the
// newest line by more than the time one append takes. So a change older
// than floor was not cut, and the pass need not read past floor to learn
// whether a newer one lacks its line: it reads back until it has met each
// queue's last line (or floor) and each candidate's last line.
// Past floor it goes on looking only for the last lines of those tasks not
// met yet, which tell what they lack. It never reads more than
// repairMaxBytes. Lines are parsed only when they may be one of these:
// on a busy log most are not, and decoding each would cost seconds.
func readTail(ctx context.Context, tail LogTail, newest map[domain.QueueRef][]domain.Task, now time.Time) (*tailRead, error) {
	read := &tailRead{
		floor: domain.Millis(now.Add(-repairWindow)),
		last:  map[domain.Key]seenLine{}, queueLast: map[domain.QueueRef]taskLine{},
	}
	sought := map[domain.Key]int64{} // candidates not met yet, with c(T)
	unmet := map[string]map[string]bool{}
	for ref, ts := range newest {
		if unmet[ref.Host] == nil {
			unmet[ref.Host] = map[string]bool{}
		}
		unmet[ref.Host][ref.Queue] = true
		for _, t := range ts {
			sought[domain.KeyOf(t)] = changedAt(t)
		}
	}
	queuesUnmet := len(newest)

	first, pastFloor, stopped, budget := true, false, false, repairMaxBytes
	err := tail.Backwards(ctx, func(raw []byte) bool {
		if budget -= len(raw) + 1; budget < 0 {
			stopped = true
			return false
		}
		host, queue, secs, ok := peek(raw)
		if !ok {
			return true // a torn fragment that a later line ran into
		}
		if first {
			first, read.floor = false, secs*1000-repairWindow.Milliseconds()
		}
		if !pastFloor && secs*1000+999 < read.floor {
			pastFloor = true
			for k, c := range sought {
				if c < read.floor {
					delete(sought, k) // an old change: not cut by the last crash
				}
			}
		}
		queueFirst := !pastFloor && unmet[string(host)][string(queue)]
		if queueFirst || names(raw, host, queue, sought) {
			if l, err := tasklog.ParseLine(raw); err == nil {
				k := domain.Key{Host: l.Host, Queue: l.Queue, ID: l.ID}
				line := seenLine{at: domain.Millis(l.At), event: l.Event, status: l.Status, attempts: l.Attempts,
					worker: l.Worker, errCode: l.Error, errBytes: l.Bytes.Error}
				if queueFirst {
					delete(unmet[l.Host], l.Queue)
					queuesUnmet--
					read.queueLast[k.Ref()] = taskLine{k, line}
				}
				if _, ok := sought[k]; ok {
					delete(sought, k)
					read.last[k] = line
				}
			}
		}
		stopped = (pastFloor || queuesUnmet == 0) && len(sought) == 0
		return !stopped
	})
	if err != nil {
		return nil, err
	}
	read.complete = !stopped
	read.covered = pastFloor || read.complete
	return read, nil
}

// peek reads a line's "host", "queue" and "t" (Unix seconds) without
// decoding it, which is what makes passing over a line cheap. The fields
// are SPEC §8's. Their keys cannot appear inside a string value, where a
// quote is escaped, and host and queue names have no escapes.
func peek(raw []byte) (host, queue []byte, secs int64, ok bool) {
	host, okHost := stringField(raw, `"host":"`)
	queue, okQueue := stringField(raw, `"queue":"`)
	i := bytes.Index(raw, []byte(`"t":`))
	if !okHost || !okQueue || i < 0 {
		return nil, nil, 0, false
	}
	digits := 0
	for _, c := range raw[i+len(`"t":`):] {
		if c < '0' || c > '9' || digits == 18 {
			break
		}
		secs = secs*10 + int64(c-'0')
		digits++
	}
	return host, queue, secs, digits > 0
}

// stringField is the string value after key (which ends with its quote).
func stringField(raw []byte, key string) ([]byte, bool) {
	i := bytes.Index(raw, []byte(key))
	if i < 0 {
		return nil, false
	}
	v := raw[i+len(key):]
	j := bytes.IndexByte(v, '"')
	if j < 0 {
		return nil, false
	}
	return v[:j], true
}

// names reports whether raw, a line of host and queue, is of one of the
// tasks: a cheap test before a line is parsed. Like peek it relies on the
// key "id" not appearing inside a string value.
func names(raw, host, queue []byte, tasks map[domain.Key]int64) bool {
	if len(tasks) == 0 {
		return false
	}
	id, ok := stringField(raw, `"id":"`)
	if !ok {
		return false
	}
	_, ok = tasks[domain.Key{Host: string(host), Queue: string(queue), ID: string(id)}]
	return ok
}

// agrees reports whether line, t's newest line, is the line of t's last
// change. A line is written at the time of its change, so a newer line says
// the log is not behind the store; one of the same millisecond must also
// show the stored state (two changes of one task can share a millisecond).
func agrees(line seenLine, t domain.Task) bool {
	c := changedAt(t)
	switch {
	case line.at > c:
		return true
	case line.at < c:
		return false
	}
	fetchedLogged := t.FetchedAt == nil || line.event == domain.EventFetched
	return line.status == t.Status && line.attempts == t.Attempts && fetchedLogged
}

// missingEvent works out the event of t's last change from how t differs
// from its newest line (last; found false when the log has none), or
// reports false when it cannot tell. The event's task is t, so the line
// gets t's status, attempts and sizes; its time is c(T).
func missingEvent(t domain.Task, last seenLine, found bool) (domain.Event, bool) {
	ev := domain.Event{At: time.UnixMilli(changedAt(t)).UTC(), Task: t}
	// The worker who held t under the claim it was processing under, as its
	// line said: whoever re-queued or finished it had it from there.
	var lastWorker string
	if found && last.status == domain.Processing && last.attempts == t.Attempts {
		lastWorker = last.worker
	}
	var leaseWorker string
	if t.Lease != nil {
		leaseWorker = t.Lease.Worker
	}
	switch {
	case t.FetchedAt != nil:
		// A fetch is the last change a task can have (only a clean, which
		// deletes it, comes after).
		ev.Kind = domain.EventFetched
	case t.Status == domain.Pending && t.Attempts == 0 && found && last.status == domain.Failed:
		// Failed in its line, pending now with a fresh attempts budget:
		// only a retry puts a failed task back (SPEC §12).
		ev.Kind = domain.EventRetried
	case t.Status == domain.Pending && t.Attempts == 0:
		// Pending and never claimed (or, after a retry, not since): only
		// a post makes that when the line before it was not a failure.
		ev.Kind = domain.EventPosted
	case t.Status == domain.Pending && gaveBackWithReason(t, last, found):
		// Claimed before and pending again with a new failure: only its
		// worker's give-back sets one (SPEC §11).
		ev.Kind, ev.Worker = domain.EventReleased, lastWorker
	case t.Status == domain.Pending:
		// Claimed before and pending again: a re-queue. Its cause (lease or
		// socket) is not in the line; the worker that lost it is. (A
		// give-back without a reason, or with one as long as the last,
		// looks the same in the store, and is repaired as a re-queue.)
		ev.Kind, ev.Worker = domain.EventRequeue, lastWorker
	case t.Status == domain.Processing && found && last.status == domain.Processing && last.attempts == t.Attempts:
		// Under the same claim as its line: the lease holder reported.
		ev.Kind, ev.Worker = domain.EventProgress, leaseWorker
	case t.Status == domain.Processing:
		ev.Kind, ev.Worker = domain.EventClaimed, leaseWorker
	case t.Status == domain.Finished:
		// The store does not keep who sent the result. If the task was
		// processing under a claim, the holder most likely did; a late
		// result from an earlier holder is named after the later one.
		ev.Kind, ev.Worker = domain.EventResult, lastWorker
	case t.Status == domain.Failed && t.Error != nil && *t.Error == domain.TimeoutError:
		ev.Kind, ev.Worker = domain.EventTimeout, lastWorker
	case t.Status == domain.Failed && t.Error != nil &&
		(*t.Error == domain.FailedError || *t.Error == domain.AttemptsError):
		// Failed by its worker, or a dead letter: come back (lease lapse,
		// socket drop, give-back) after its last allowed attempt. Either
		// way the line is failed, with the task's error code; like a
		// result's, a failure is named after the claim's holder.
		ev.Kind, ev.Worker = domain.EventFailed, lastWorker
	case t.Status == domain.Failed && t.Error != nil && *t.Error == domain.CancelledError:
		// Cancelled by a user (SPEC §12): the line names the worker that
		// held the lease, if it was processing under the claim its line
		// tells, and nobody if it was pending.
		ev.Kind, ev.Worker = domain.EventCancelled, lastWorker
	default:
		return domain.Event{}, false
	}
	return ev, true
}

// gaveBackWithReason reports whether pending t's failure (the reason of a
// give-back) is not the one its newest line sized: a give-back replaced it
// since. A lease lapse or a socket drop keeps the failure as it was.
func gaveBackWithReason(t domain.Task, last seenLine, found bool) bool {
	if domain.IsNull(t.Failure) {
		return false
	}
	// The size the event log gives it: as the task file holds it
	// (encoding/json compacts and escapes a raw payload).
	stored, err := json.Marshal(t.Failure)
	return err == nil && (!found || int64(len(stored)) != last.errBytes)
}

// cutClean is the cleaned line q lacks, if any: when q's last line is of a
// task the store no longer holds and is not its cleaned line, the task was
// deleted by a clean whose line was cut. (A task set aside as corrupt has
// a failed line with error "corrupt" instead, or without an error from a
// server before SPEC §11, and is left alone; so is a task this start set
// aside, whose failed line comes after the repair.) The line a clean writes
// carries the task as it was; here only what its last line said is known:
// id, status and attempts.
func (s *Service) cutClean(ctx context.Context, q *domain.Queue, read *tailRead, setAside []domain.Key) ([]domain.Event, error) {
	last, ok := read.queueLast[q.Ref()]
	logged := last.line.event == domain.EventFailed &&
		(last.line.errCode == domain.CorruptError || last.line.errCode == "")
	if !ok || last.line.event == domain.EventCleaned || logged || slices.Contains(setAside, last.key) {
		return nil, nil
	}
	_, err := s.repo.Get(ctx, last.key)
	switch {
	case err == nil:
		return nil, nil
	case !errors.Is(err, domain.ErrNotFound):
		return nil, fmt.Errorf("repair event log: %w", err)
	}
	k := last.key
	t := domain.Task{ID: k.ID, Host: k.Host, Queue: k.Queue, Status: last.line.status, Attempts: last.line.attempts}
	return []domain.Event{t.Clean(s.clock.Now())}, nil
}
