package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// MaxWait is the longest a claim may wait for work (SPEC §3: wait 0 to 60 s).
const MaxWait = 60 * time.Second

// Claim leases to worker the oldest pending task whose item matches query
// (nil: any). With no such task it waits up to wait for one to be posted or
// re-queued, and returns domain.ErrNotFound if none came. A claim needs no
// flush: if it is lost in a crash the task is simply pending again.
func (s *Service) Claim(ctx context.Context, q *domain.Queue, worker string, query json.RawMessage, wait time.Duration) (domain.Task, error) {
	m, err := s.queries.matcher(query)
	if err != nil {
		return domain.Task{}, err
	}
	t, err := s.claimNow(ctx, q, worker, m)
	if !errors.Is(err, domain.ErrNotFound) || wait <= 0 {
		return t, err
	}
	release, err := s.HoldWaiter()
	if err != nil {
		return domain.Task{}, err
	}
	defer release()
	waitCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	t, err = s.Await(waitCtx, q, worker, m)
	if err != nil && ctx.Err() == nil && waitCtx.Err() != nil {
		return domain.Task{}, domain.ErrNotFound // waited long enough
	}
	return t, err
}

// Await claims a task for worker that m accepts, waiting in the queue's
// line for as long as it takes: until a task comes, ctx ends (its error is
// returned) or the server drains (domain.ErrNotFound). ctx only ends the
// waiting: a claim once begun runs to its end, task moved and event logged,
// and the caller then holds the task.
func (s *Service) Await(ctx context.Context, q *domain.Queue, worker string, m ports.Matcher) (domain.Task, error) {
	var acting ports.Waiter // the woken waiter whose wake this look uses
	for {
		if err := ctx.Err(); err != nil {
			if acting != nil {
				s.passOn(q, acting)
			}
			return domain.Task{}, err
		}
		// Join the line before looking, so a task posted between the look
		// and the wait still wakes us.
		w := s.notifier.Wait(q.Ref())
		t, err := s.claimNow(context.WithoutCancel(ctx), q, worker, m)
		if acting != nil && err != nil {
			s.passOn(q, acting) // woken in vain: the next in line may want it
		}
		acting = nil
		if err == nil || !errors.Is(err, domain.ErrNotFound) {
			// Woken while looking, w hands its wake on: the task taken (if
			// any) may be an older one.
			s.leave(q, w)
			return t, err
		}
		select {
		case <-w.Woken():
			w.Leave()
			acting = w
		case <-s.draining:
			s.leave(q, w)
			return domain.Task{}, domain.ErrNotFound
		case <-ctx.Done():
			s.leave(q, w)
			return domain.Task{}, ctx.Err()
		}
	}
}

// leave takes w out of the line without using a wake it may have got.
func (s *Service) leave(q *domain.Queue, w ports.Waiter) {
	if w.Leave() {
		s.passOn(q, w)
	}
}

// passOn hands a wake that w did not use to the next claim in line, unless
// nothing is pending any more: then whoever took the task used the wake, and
// handing it on would only wake claims to find nothing.
func (s *Service) passOn(q *domain.Queue, w ports.Waiter) {
	if s.repo.Counts(q.Ref()).Pending > 0 {
		w.PassOn()
	}
}

func (s *Service) claimNow(ctx context.Context, q *domain.Queue, worker string, m ports.Matcher) (domain.Task, error) {
	var ev domain.Event
	t, err := s.repo.ClaimNext(ctx, q.Ref(), m, func(t *domain.Task) error {
		var err error
		*t, ev, err = t.Claim(worker, q.Settings.Lease(), s.clock.Now())
		return err
	}, s.recorder(ctx, q, &ev))
	if err != nil {
		if errors.Is(err, domain.ErrNotFound) {
			return domain.Task{}, err
		}
		return domain.Task{}, fmt.Errorf("claim in %s/%s: %w", q.Host, q.Name, err)
	}
	return t, nil
}

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
		return nil, domain.E(domain.KindInvalid, "invalid_query", "query is not valid JSON: %v", err)
	}
	text := buf.String()
	c.mu.Lock()
	m, ok := c.entries[text]
	c.mu.Unlock()
	if ok {
		return m, nil
	}
	schema, err := c.compiler.Compile(json.RawMessage(text))
	if err != nil {
		return nil, domain.E(domain.KindInvalid, "invalid_query", "query is not a valid JSON Schema: %v", err)
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

func (m *matcher) Key() string                     { return m.key }
func (m *matcher) Match(item json.RawMessage) bool { return len(m.schema.Validate(item)) == 0 }
