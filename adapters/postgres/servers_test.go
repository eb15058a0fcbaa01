package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/taskhoster/taskhoster/adapters/clock"
	"github.com/taskhoster/taskhoster/adapters/memlog"
	"github.com/taskhoster/taskhoster/adapters/notify"
	"github.com/taskhoster/taskhoster/adapters/postgres"
	"github.com/taskhoster/taskhoster/adapters/schema"
	"github.com/taskhoster/taskhoster/app"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/internal/pgtest"
	"github.com/taskhoster/taskhoster/ports"
)

// nopSyncer: a change on PostgreSQL is durable at COMMIT.
type nopSyncer struct{}

func (nopSyncer) Sync(context.Context) error { return nil }

// node is one server on a shared database: its own Store (connections,
// per-queue sequencers), Service and event log; the clock is shared, as
// postgres.Clock makes every server's the database's.
type node struct {
	store *postgres.Store
	svc   *app.Service
	log   *memlog.Log
}

func newNodes(t *testing.T, url string, n int, c ports.Clock) []node {
	t.Helper()
	nodes := make([]node, n)
	for i := range nodes {
		s := mustOpen(t, url)
		l := &memlog.Log{}
		nodes[i] = node{store: s, log: l, svc: app.New(app.Deps{
			Repo: s, Syncer: nopSyncer{}, Log: l, Notifier: notify.NewHub(),
			Clock: c, Compiler: schema.Compiler{}, Pauses: s,
		})}
	}
	return nodes
}

func testQueue(settings domain.Settings) *domain.Queue {
	return &domain.Queue{Host: "task.example.com", Name: "resize", Settings: settings,
		Item: schema.Any(), Progress: schema.Any(), Result: schema.Any()}
}

// count counts the events of each kind per task over the nodes' logs.
func count(nodes []node) map[domain.EventKind]map[string]int {
	out := make(map[domain.EventKind]map[string]int)
	for _, n := range nodes {
		for _, ev := range n.log.Events() {
			if out[ev.Kind] == nil {
				out[ev.Kind] = make(map[string]int)
			}
			out[ev.Kind][ev.Task.ID]++
		}
	}
	return out
}

// Every server sweeps the shared database, side by side, with no leader:
// each transition is decided by the rule re-checked under the task's row
// lock (app's apply checks DueAt again on the record Update locked, and
// clean on the one Delete locked), so a lease lapse, a queue timeout and a
// retention clean happen once whatever number of sweeps saw them due:
// exactly one event per task over every server's log.
func TestSweepOnEveryServerDoesEachTransitionOnce(t *testing.T) {
	url := pgtest.Database(t)
	start := time.UnixMilli(1751500000000)
	c := clock.NewFake(start)
	nodes := newNodes(t, url, 3, c)
	q := testQueue(domain.Settings{LeaseSeconds: 2, QueueSeconds: 10, RetainSeconds: 5,
		RetainFrom: domain.RetainFromFinished, MaxItemBytes: 1 << 16})
	ctx := context.Background()

	const tasks = 120
	ids := make([]string, tasks)
	for i := range ids {
		task, err := nodes[i%len(nodes)].svc.Post(ctx, q, "alice", []byte(fmt.Sprintf(`{"n":%d}`, i)), app.PostOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = task.ID
	}
	claimed := make(map[string]bool)
	for i := range tasks / 2 {
		task, err := nodes[i%len(nodes)].svc.Claim(ctx, q, fmt.Sprintf("w%d", i), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		claimed[task.ID] = true
	}

	// Every node sweeps twice at once at each step.
	sweepAll := func() {
		var wg sync.WaitGroup
		for _, n := range nodes {
			for range 2 {
				wg.Go(func() {
					if err := n.svc.Sweep(ctx, []*domain.Queue{q}); err != nil {
						t.Errorf("sweep: %v", err)
					}
				})
			}
		}
		wg.Wait()
	}
	exactlyOnce := func(kind domain.EventKind, want map[string]bool) {
		t.Helper()
		got := count(nodes)[kind]
		for _, id := range ids {
			switch n := got[id]; {
			case want[id] && n != 1:
				t.Errorf("%d %s events of task %s over the servers' logs, want 1", n, kind, id)
			case !want[id] && n != 0:
				t.Errorf("%d %s events of task %s, want none", n, kind, id)
			}
		}
	}
	all := make(map[string]bool)
	for _, id := range ids {
		all[id] = true
	}

	c.Set(start.Add(3 * time.Second)) // the leases have lapsed
	sweepAll()
	exactlyOnce(domain.EventRequeue, claimed)
	c.Set(start.Add(11 * time.Second)) // every task is past queueSeconds
	sweepAll()
	exactlyOnce(domain.EventTimeout, all)
	c.Set(start.Add(17 * time.Second)) // and past retention
	sweepAll()
	exactlyOnce(domain.EventCleaned, all)
	if counts := nodes[0].store.Counts(q.Ref()); counts != (ports.Counts{}) {
		t.Errorf("counts after the cleans = %+v, want none", counts)
	}
}
