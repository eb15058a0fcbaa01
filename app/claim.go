package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// MaxWait is the longest a claim over HTTP may wait for work (SPEC §3:
// wait 0 to 60 s).
const MaxWait = 60 * time.Second

// WaitForever has a claim wait until its ctx ends (a worker socket's claims).
const WaitForever = time.Duration(math.MaxInt64)

// Claim leases to worker the oldest pending task whose item matches query
// (nil: any). It is the one claim of HTTP and the worker socket alike. With
// no such task it waits up to wait (0: not at all) for one to be posted or
// re-queued, and returns domain.ErrNotFound if none came, or at once when
// the server drains; if ctx ends first, ctx's error. ctx only ends the
// waiting: a claim once begun runs to its end, task moved, event logged and
// flushed, and the caller then holds the task.
//
// A claim that has to wait takes one of the server's waiting places
// (--max-waiting) for as long as it waits, or answers 503 too_many_waiting;
// one given a Place (a socket takes it as the claim message arrives, so
// that claims are refused in the order they came) uses that instead.
func (s *Service) Claim(ctx context.Context, q *domain.Queue, worker string, query json.RawMessage, wait time.Duration, place ...*Place) (domain.Task, error) {
	var p *Place
	if len(place) > 0 {
		p = place[0]
	}
	t, _, err := s.claim(ctx, q, worker, query, wait, p, 0)
	return t, err
}

// ClaimWatched is Claim for a worker that holds the task it takes and
// follows the task's later changes (a worker socket, for SPEC §12's
// cancelled message). With the task it returns a Watch of it, buffering up
// to buffer changes, whose Task is the record claimed: subscribed in the
// claim's own Then, which runs before the Then of any later change of the
// task (ports.TaskRepository), so it misses none and sees none twice
// without reading the task. Where other servers may change the task (a
// Notifier that says so, pgnotify), their news of a change made just after
// the claim may arrive before the subscription: the watch then reads the
// task, as Watch does (and if that read fails, no Watch is returned).
func (s *Service) ClaimWatched(ctx context.Context, q *domain.Queue, worker string, query json.RawMessage, wait time.Duration, place *Place, buffer int) (domain.Task, *Watch, error) {
	return s.claim(ctx, q, worker, query, wait, place, max(buffer, 1))
}

// claim is Claim, and with buffer > 0 ClaimWatched.
func (s *Service) claim(ctx context.Context, q *domain.Queue, worker string, query json.RawMessage, wait time.Duration, place *Place, buffer int) (domain.Task, *Watch, error) {
	m, err := s.queries.matcher(query)
	if err != nil {
		return domain.Task{}, nil, err
	}
	if wait <= 0 || s.drained.Err() != nil {
		t, sub, err := s.claimSubscribed(ctx, q, worker, m, buffer)
		return s.watched(ctx, t, sub, err)
	}
	// The first look is Await's, made in line: a look before joining the
	// line would need a second one after, for a task that came between.
	var t domain.Task
	var sub ports.Subscription
	looked := false
	var taken *Place // the waiting place taken here, if none was given
	defer func() {
		if taken != nil {
			taken.Leave()
		}
	}()
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if wait < WaitForever {
		waitCtx, cancel = context.WithTimeout(waitCtx, wait)
		defer cancel()
	}
	defer context.AfterFunc(s.drained, cancel)()
	err = s.notifier.Await(waitCtx, q.Ref(), func() (bool, error) {
		// The queue in force at each look: a reload while the claim
		// waited may have lowered maxAttempts.
		got, gotSub, err := s.claimSubscribed(context.WithoutCancel(ctx), s.current(q), worker, m, buffer)
		if errors.Is(err, domain.ErrNotFound) {
			if !looked && place == nil {
				// Nothing yet: from now on it waits, in a place of its own.
				if taken, err = s.Place(); err != nil {
					return false, err
				}
			}
			looked = true
			if m == nil {
				// Nothing claimable at all, not only nothing this query
				// wants: no other claim in line could use the wake either
				// (ports.Notifier.Await, notify.WithEmptyLook).
				return false, domain.ErrNotFound
			}
			return false, nil
		}
		t, sub = got, gotSub
		return err == nil, err
	})
	switch {
	case err == nil:
		return s.watched(ctx, t, sub, nil)
	case ctx.Err() != nil:
		return domain.Task{}, nil, ctx.Err()
	case waitCtx.Err() != nil:
		return domain.Task{}, nil, domain.ErrNotFound // waited long enough, or draining
	}
	return domain.Task{}, nil, err
}

// watched is the Watch of task t claimed with subscription sub (nil:
// none asked for), once the claim returned err. A read that fails leaves
// the claim as it is and no Watch: the caller watches on its own.
func (s *Service) watched(ctx context.Context, t domain.Task, sub ports.Subscription, err error) (domain.Task, *Watch, error) {
	if err != nil || sub == nil {
		return t, nil, err
	}
	w := &Watch{Task: t, sub: sub}
	if s.othersMayChange() && s.mayHaveMissed(t) {
		if w, err = s.follow(ctx, domain.KeyOf(t), sub); err != nil {
			return t, nil, nil
		}
	}
	w.claim = t.Attempts
	return t, w, nil
}

// othersMayChange reports whether other servers may change this server's
// tasks, their news arriving a little after their COMMIT: a Notifier
// across servers says so (pgnotify.Notifier.Others).
func (s *Service) othersMayChange() bool {
	o, ok := s.notifier.(interface{ Others() bool })
	return ok && o.Others()
}

// mayHaveMissed reports whether another server's change of the claimed
// task t may have been announced here before the claim's Then subscribed,
// so that the subscription would not get it: a Notifier that remembers
// what it heard says (pgnotify.Notifier.Heard); without one, yes.
func (s *Service) mayHaveMissed(t domain.Task) bool {
	h, ok := s.notifier.(interface {
		Heard(k domain.Key, attempts int) bool
	})
	return !ok || h.Heard(domain.KeyOf(t), t.Attempts)
}

// claimSubscribed claims a task now, if one is there, and flushes the
// claim; with buffer > 0 it also subscribes to the task's changes in the
// claim's Then, just after the claim is announced.
func (s *Service) claimSubscribed(ctx context.Context, q *domain.Queue, worker string, m ports.Matcher, buffer int) (domain.Task, ports.Subscription, error) {
	t, sub, err := s.claimStored(ctx, q, worker, m, buffer)
	if err != nil {
		return t, sub, err
	}
	if err := s.flushClaims(ctx); err != nil {
		if sub != nil {
			sub.Close()
		}
		return domain.Task{}, nil, fmt.Errorf("claim %s: %w", t.ID, err)
	}
	return t, sub, nil
}

// flushClaims makes the claims made so far durable before they are
// answered (SPEC §6), as every write the client is told of: a claim's
// attempt count must outlast a crash (a claim lost with it would let a
// task be handed out once too often on a queue that bounds attempts), and
// the file store lets a claimed task's pending copy go in this commit. The
// commit is waited for even if ctx ends: the claims are made.
//
// A claim woken for a task just posted may be one the post's commit waits
// for (durable.Syncer.Expect): it arrives, so that the task reaches its
// worker one commit after the post, not two.
func (s *Service) flushClaims(ctx context.Context) error {
	ctx = context.WithoutCancel(ctx)
	if a, ok := s.syncer.(arriver); ok {
		return a.Arrive(ctx)
	}
	return s.syncer.Sync(ctx)
}

// arriver is a Syncer whose flush may wait for a claim on its way
// (durable.Syncer).
type arriver interface {
	Arrive(ctx context.Context) error
}

// claimStored is the claim itself, stored and logged, not flushed: the
// caller flushes before it answers (ClaimMany, once for all its claims).
// A task it finds that it may not hand out it ends as the rules say, and
// it takes the next: one whose attempts are spent (a reload lowered
// maxAttempts while it waited) becomes a dead letter; one older than
// queueSeconds, which the sweep has not reached yet, times out. However
// many there are, since a claim that gave up would wait with claimable
// tasks behind them, and no wake to come for those.
func (s *Service) claimStored(ctx context.Context, q *domain.Queue, worker string, m ports.Matcher, buffer int) (domain.Task, ports.Subscription, error) {
	for {
		t, sub, over, err := s.claimOne(ctx, q, worker, m, buffer)
		switch {
		case over.id == "":
			return t, sub, err
		case over.late:
			err = s.apply(ctx, q, over.id, domain.DueTimeout) // the sweep's own, come early
		default:
			_, err = s.transition(ctx, q, over.id, func(t domain.Task, now time.Time) (domain.Task, domain.Event, error) {
				return t.Exhaust(q.Settings, now)
			})
			if isStateConflict(err) || errors.Is(err, domain.ErrNotFound) {
				err = nil
			}
		}
		if err != nil {
			return domain.Task{}, nil, fmt.Errorf("claim in %s/%s: %w", q.Host, q.Name, err)
		}
	}
}

// overdue is a pending task a claim met but may not hand out: its attempts
// are spent (domain.ErrAttemptsSpent), or it outlived its queue (late,
// domain.ErrQueueTimeUp).
type overdue struct {
	id   string
	late bool
}

// claimOne claims the first task m matches, or reports one it may not hand
// out, left as it was (overdue).
func (s *Service) claimOne(ctx context.Context, q *domain.Queue, worker string, m ports.Matcher, buffer int) (_ domain.Task, _ ports.Subscription, over overdue, _ error) {
	if s.Paused(q) {
		return domain.Task{}, nil, overdue{}, domain.ErrNotFound // a paused queue hands nothing out
	}
	var ev domain.Event
	ctx, then := s.staging(ctx, q, &ev)
	var sub ports.Subscription
	if buffer > 0 {
		announce := then
		then = func(t domain.Task) error {
			err := announce.Call(t)
			sub = s.notifier.Subscribe(domain.KeyOf(t), buffer)
			return err
		}
	}
	fail := func(err error) (domain.Task, ports.Subscription, overdue, error) {
		if sub != nil {
			sub.Close()
		}
		return domain.Task{}, nil, overdue{}, err
	}
	t, err := s.repo.ClaimNext(ctx, q.Ref(), m, s.clock.Now(), func(t *domain.Task) error {
		// The claim's own time is read here, under the store's lock, not
		// before the call: a claim that waited for the lock while a post
		// or a re-queue made this task pending must not be stamped before
		// that change (the start-up repair reads a line older than the
		// task's last change as cut).
		//
		// A store may apply fn to more than one task in one call (the
		// PostgreSQL store's guess from its stock, then a locked read): only
		// the last refusal counts, and none once a task is claimed.
		//
		// The pause is looked at again here, under the lock: a pause that
		// landed while this claim waited for it has answered its manager,
		// and from then on no claim may take a task.
		over = overdue{}
		if s.Paused(q) {
			return errPausedMeanwhile
		}
		var err error
		*t, ev, err = t.ClaimUnder(worker, q.Settings, s.clock.Now())
		switch {
		case errors.Is(err, domain.ErrAttemptsSpent):
			over = overdue{id: t.ID}
		case errors.Is(err, domain.ErrQueueTimeUp):
			over = overdue{id: t.ID, late: true}
		}
		return err
	}, then)
	switch {
	case over.id != "":
		return domain.Task{}, nil, over, nil // refused in fn: no Then ran, no subscription
	case errors.Is(err, domain.ErrNotFound), errors.Is(err, errPausedMeanwhile):
		return fail(domain.ErrNotFound) // a waiting claim waits on, for the resume's wake
	case err != nil:
		return fail(fmt.Errorf("claim in %s/%s: %w", q.Host, q.Name, err))
	}
	return t, sub, overdue{}, nil
}

var errPausedMeanwhile = errors.New("the queue was paused meanwhile")

// CompileQuery checks a claim query up front (a socket answers a bad one
// with an error before it waits).
func (s *Service) CompileQuery(query json.RawMessage) (ports.Matcher, error) {
	return s.queries.matcher(query)
}

// queryCache keeps compiled claim queries by their compacted text: workers
// send the same query with every claim, and compiling a schema costs far
// more than matching one.
type queryCache struct {
	compiler ports.SchemaCompiler
	max      int

	mu      sync.Mutex
	entries map[string]*matcher
}

func newQueryCache(c ports.SchemaCompiler, max int) *queryCache {
	return &queryCache{compiler: c, max: max, entries: make(map[string]*matcher)}
}

// matcher returns the matcher for query; nil (match all) for an absent or
// null query.
func (c *queryCache) matcher(query json.RawMessage) (ports.Matcher, error) {
	if domain.IsNull(query) {
		return nil, nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, query); err != nil {
		return nil, domain.E(domain.KindInvalid, domain.CodeInvalidQuery, "query is not valid JSON: %v", err)
	}
	text := buf.String()
	c.mu.Lock()
	m, ok := c.entries[text]
	c.mu.Unlock()
	if ok {
		return m, nil
	}
	// Bounded as a payload's numbers (payload): the schema compares them
	// exactly, at a cost that grows with their size, and a query is tried
	// on every pending task (a const of 1e999999 costs 20 ms a task).
	if n := domain.OversizedNumber(buf.Bytes()); n != "" {
		return nil, domain.E(domain.KindInvalid, domain.CodeInvalidQuery,
			"query holds the number %s, of more than %d digits or an exponent beyond %d", n, domain.MaxNumberDigits, domain.MaxNumberExponent)
	}
	schema, err := c.compiler.Compile(json.RawMessage(text))
	if err != nil {
		return nil, domain.E(domain.KindInvalid, domain.CodeInvalidQuery, "query is not a valid JSON Schema: %v", err)
	}
	m = &matcher{key: text, schema: schema}
	c.mu.Lock()
	if len(c.entries) >= c.max {
		// Many distinct queries means they are not being reused anyway;
		// starting afresh bounds memory without bookkeeping.
		clear(c.entries)
	}
	c.entries[text] = m
	c.mu.Unlock()
	return m, nil
}

type matcher struct {
	key    string
	schema domain.Schema
}

func (m *matcher) Key() string { return m.key }

// Match applies the query to item as it was posted. An item posted as
// null is read back from every store as none (domain.DecodeTask), which is
// no JSON at all: judged as such, every query with a keyword refused it,
// {"type":"null"} too, and a claim waited beside a task its query accepts.
func (m *matcher) Match(item json.RawMessage) bool {
	if len(item) == 0 {
		item = jsonNull
	}
	return len(m.schema.Validate(item)) == 0
}

var jsonNull = json.RawMessage("null")

// Query is the claim query Match applies: a store that can judge part of a
// JSON Schema itself (adapters/postgres) reads it here.
func (m *matcher) Query() json.RawMessage { return json.RawMessage(m.key) }
