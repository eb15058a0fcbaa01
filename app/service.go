// Package app holds Taskhoster's use cases: post, status, claim, progress,
// result and the sweep. Each one loads a task through the repository, applies
// a domain rule, records the event and, where the client is promised
// durability, waits for the flush before answering.
package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// Observer is told of every transition and of refused results (metrics).
type Observer interface {
	Observe(ev domain.Event)
	ResultRefused(q domain.QueueRef)
}

// Deps are what the use cases run on.
type Deps struct {
	Repo     ports.TaskRepository
	Syncer   ports.Syncer
	Log      ports.EventLog
	Notifier ports.Notifier
	Clock    ports.Clock
	Compiler ports.SchemaCompiler
	Pauses   ports.Pauses // optional: without it no queue can be paused
	// Config, optional, is the configuration in force: a claim that waits
	// judges each look by its queue as that has it then (a reload's
	// maxAttempts and leaseSeconds), not as it was when the claim began.
	Config   ports.Config
	Observer Observer    // optional
	Logger   *zap.Logger // optional
	// MaxWaiting bounds the claims waiting for work at once, over HTTP and
	// sockets together (each costs a goroutine and a timer). Default 50 000.
	MaxWaiting int
	// MovesBackAtOnce bounds the moves back (re-queues) one call runs side
	// by side: a socket closing with tasks held, a sweep finding leases
	// lapsed (sideBySide). Default 1, one after another. The file store
	// commits each move back before it returns, so many at once share
	// commits; on a database each takes a pooled connection.
	MovesBackAtOnce int
}

// DefaultMaxWaiting is Deps.MaxWaiting's default.
const DefaultMaxWaiting = 50_000

// Service runs the use cases. It is safe for concurrent use.
type Service struct {
	repo     ports.TaskRepository
	syncer   ports.Syncer
	log      ports.EventLog
	notifier ports.Notifier
	clock    ports.Clock
	pauses   ports.Pauses
	config   ports.Config
	observer Observer
	logger   *zap.Logger
	queries  *queryCache

	waiting    atomic.Int64 // claims parked waiting for work
	maxWaiting int64

	movesBackAtOnce int // Deps.MovesBackAtOnce

	// drained ends when the server begins to shut down, so that claims
	// waiting for work answer at once instead of holding the shutdown up.
	drained context.Context
	drain   context.CancelFunc

	delays delays // timers for delayed tasks (delays.go)
}

// New builds a Service.
func New(d Deps) *Service {
	if d.Observer == nil {
		d.Observer = nopObserver{}
	}
	if d.Logger == nil {
		d.Logger = zap.NewNop()
	}
	if d.MaxWaiting <= 0 {
		d.MaxWaiting = DefaultMaxWaiting
	}
	drained, drain := context.WithCancel(context.Background())
	return &Service{
		maxWaiting: int64(d.MaxWaiting), movesBackAtOnce: max(d.MovesBackAtOnce, 1),
		repo: d.Repo, syncer: d.Syncer, log: d.Log, notifier: d.Notifier,
		clock: d.Clock, pauses: d.Pauses, config: d.Config, observer: d.Observer, logger: d.Logger,
		queries: newQueryCache(d.Compiler, 512),
		drained: drained, drain: drain,
		delays: delays{timers: make(map[domain.QueueRef]*alarm)},
	}
}

// current is q as the configuration in force has it now; q itself without
// a Config, or once q's file is gone (the socket or request that waits is
// being let go).
func (s *Service) current(q *domain.Queue) *domain.Queue {
	if s.config == nil {
		return q
	}
	if h, ok := s.config.Host(q.Host); ok {
		if now := h.Queues[q.Name]; now != nil {
			return now
		}
	}
	return q
}

// A Place is one of the server's places for a claim waiting for work: the
// memory waiting claims take is bounded whoever sends them. Leave it when
// the claim stops waiting; leaving twice is harmless.
type Place struct {
	once  sync.Once
	leave func()
}

// Place takes a waiting place, or refuses with 503 too_many_waiting when
// all are taken.
func (s *Service) Place() (*Place, error) {
	if s.waiting.Add(1) > s.maxWaiting {
		s.waiting.Add(-1)
		return nil, errTooManyWaiting
	}
	return &Place{leave: func() { s.waiting.Add(-1) }}, nil
}

// Leave gives the place back.
func (p *Place) Leave() { p.once.Do(p.leave) }

var errTooManyWaiting = domain.E(domain.KindUnavailable, domain.CodeTooManyWaiting,
	"too many claims are waiting for work on this server; try again later")

// Drain makes every waiting claim return now and every later claim answer
// without waiting. Called once shutdown begins.
func (s *Service) Drain() {
	s.drain()
	s.stopDelays()
}

// rule is one domain transition of a stored task at now: the task after it
// and the event it caused, or a refusal.
type rule func(t domain.Task, now time.Time) (domain.Task, domain.Event, error)

// transition applies r to the stored task id of q and records the event
// once the change is stored (see record). On a refusal it returns the stored
// task unchanged with r's error.
func (s *Service) transition(ctx context.Context, q *domain.Queue, id string, r rule) (domain.Task, error) {
	var ev domain.Event
	ctx, then := s.staging(ctx, q, &ev)
	return s.repo.Update(ctx, key(q, id), func(t *domain.Task) error {
		next, e, err := r(*t, s.clock.Now())
		if err != nil {
			return err
		}
		*t, ev = next, e
		return nil
	}, then)
}

// recorder returns the Then that records *ev once its change is stored. The
// repository runs it before any later change of the queue is indexed, so
// the event log and watchers see a task's changes in the order they were
// stored, while the writes themselves proceed side by side.
func (s *Service) recorder(ctx context.Context, q *domain.Queue, ev *domain.Event) ports.Then {
	if st, ok := ctx.Value(stagedKey{}).(*staged); ok && st.ev == ev {
		return func(domain.Task) error {
			if st.logged {
				return s.announce(q, *ev)
			}
			return s.record(ctx, q, *ev)
		}
	}
	return func(domain.Task) error { return s.record(ctx, q, *ev) }
}

// A repository that keeps the event log in its own database
// (adapters/postgres) writes a change's line in the change's transaction,
// so that store and log never disagree. It finds the event in the
// context of the call, with StagedEvent: the use case puts it there with
// staging before calling the repository, and fills it in before the
// repository commits (in fn, or before Create). Once the repository wrote
// the line, the change's Then does not append it again.
type staged struct {
	ev      *domain.Event
	batch   []domain.Event // a batch's posts (StagedEvents), instead of ev
	archive bool
	logged  bool
}

type stagedKey struct{}

// staging is ctx carrying ev, the event the change made under it records,
// and the Then that records it (see recorder).
func (s *Service) staging(ctx context.Context, q *domain.Queue, ev *domain.Event) (context.Context, ports.Then) {
	ctx = context.WithValue(ctx, stagedKey{}, &staged{ev: ev, archive: q.Settings.ArchivePayloads})
	return ctx, s.recorder(ctx, q, ev)
}

// StagedEvent is the event of the change a repository is storing under
// ctx, if the use case staged one, and logged, which the repository calls
// once it wrote the event's line in the change's own transaction. It is to
// be called after the change's fn ran, just before COMMIT. archive is the
// queue's archivePayloads setting.
func StagedEvent(ctx context.Context) (ev domain.Event, archive bool, logged func(), ok bool) {
	st, ok := ctx.Value(stagedKey{}).(*staged)
	if !ok || st.ev == nil || st.ev.Kind == "" {
		return domain.Event{}, false, nil, false
	}
	return *st.ev, st.archive, func() { st.logged = true }, true
}

// StagedEvents is StagedEvent for a batch of posts
// (ports.TaskRepository.CreateAll): the posted events of its tasks, in
// their order, and logged, to call once their lines are written in the
// batch's own transaction.
func StagedEvents(ctx context.Context) (evs []domain.Event, archive bool, logged func(), ok bool) {
	st, ok := ctx.Value(stagedKey{}).(*staged)
	if !ok || st.batch == nil {
		return nil, false, nil, false
	}
	return st.batch, st.archive, func() { st.logged = true }, true
}

// stagingBatch is staging for a batch of posts: ctx carrying their events
// evs, and the Then that records the event of the task it is called with.
func (s *Service) stagingBatch(ctx context.Context, q *domain.Queue, evs []domain.Event) (context.Context, ports.Then) {
	st := &staged{batch: evs, archive: q.Settings.ArchivePayloads}
	ctx = context.WithValue(ctx, stagedKey{}, st)
	byID := make(map[string]int, len(evs))
	for i, ev := range evs {
		byID[ev.Task.ID] = i
	}
	return ctx, func(t domain.Task) error {
		ev := evs[byID[t.ID]]
		if st.logged {
			return s.announce(q, ev)
		}
		return s.record(ctx, q, ev)
	}
}

// record makes one stored transition known: the event log first (a line is
// appended before the transition is acknowledged), then metrics and waiters.
func (s *Service) record(ctx context.Context, q *domain.Queue, ev domain.Event) error {
	if err := s.log.Append(ctx, ev, q.Settings.ArchivePayloads); err != nil {
		return fmt.Errorf("log %s of %s: %w", ev.Kind, ev.Task.ID, err)
	}
	return s.announce(q, ev)
}

// announce tells metrics and waiters of a stored transition whose line is
// written.
func (s *Service) announce(q *domain.Queue, ev domain.Event) error {
	s.observer.Observe(ev)
	s.notifier.Publish(ev)
	s.watchDelay(q, ev.Task)
	return nil
}

// retry is how a task of q that comes back is treated: q's settings, and a
// fresh draw for the backoff's jitter.
func (s *Service) retry(q *domain.Queue) domain.Retry {
	return domain.Retry{Settings: q.Settings, Jitter: mrand.Float64()}
}

// newID returns 16 lower-case hex characters from a cryptographic source.
func newID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("new task id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// isStateConflict reports whether err is one of the domain's "not in a state
// for that" refusals, which are answers, not failures.
func isStateConflict(err error) bool {
	return errors.Is(err, domain.ErrTerminal) || errors.Is(err, domain.ErrNotPending) ||
		errors.Is(err, domain.ErrNotProcessing) || errors.Is(err, domain.ErrNotLeaseHolder) ||
		errors.Is(err, domain.ErrNotYet)
}

type nopObserver struct{}

func (nopObserver) Observe(domain.Event)          {}
func (nopObserver) ResultRefused(domain.QueueRef) {}
