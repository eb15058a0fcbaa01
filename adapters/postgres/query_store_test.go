package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/taskhoster/taskhoster/adapters/index"
	"github.com/taskhoster/taskhoster/adapters/postgres"
	"github.com/taskhoster/taskhoster/adapters/schema"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/internal/pgtest"
	"github.com/taskhoster/taskhoster/ports"
	"github.com/taskhoster/taskhoster/tests/contract"
)

func claimWith(tb testing.TB, r ports.TaskRepository, ref domain.QueueRef, m ports.Matcher, now time.Time) string {
	tb.Helper()
	got, err := r.ClaimNext(context.Background(), ref, m, now, func(t *domain.Task) error {
		next, _, err := t.Claim("box-1", time.Minute, now)
		*t = next
		return err
	}, nil)
	if errors.Is(err, domain.ErrNotFound) {
		return ""
	}
	if err != nil {
		tb.Fatalf("claim: %v", err)
	}
	return got.ID
}

// Random queries and items from a small grammar: every claim on
// PostgreSQL takes the task the memory store takes, which is the first
// pending task in claim order the schema library accepts.
func TestClaimQueriesAgainstMemoryStore(t *testing.T) {
	pg := mustOpen(t, pgtest.Database(t))
	mem := index.New()
	rng := rand.New(rand.NewPCG(14, 4))
	now := epoch.Add(time.Hour)
	for round := range 25 {
		ref := domain.QueueRef{Host: "task.example.com", Queue: fmt.Sprintf("round%d", round)}
		type posted struct {
			id   string
			item json.RawMessage
		}
		// The pending tasks in claim order: priority 2 to 0, then posting
		// order.
		var pending [3][]posted
		for n := range 30 {
			item := json.RawMessage(postgres.RandomItem(rng, 3))
			prio := rng.IntN(3)
			task, _ := domain.Post(fmt.Sprintf("%016x", round<<8|n), ref.Host, ref.Queue, item, "alice", epoch.Add(time.Duration(n)*time.Second), domain.PostOptions{Priority: prio})
			for _, r := range []ports.TaskRepository{pg, mem} {
				if err := r.Create(context.Background(), task, nil); err != nil {
					t.Fatalf("create %s: %v", item, err)
				}
			}
			if string(item) == "null" {
				item = nil // what every store reads back
			}
			pending[2-prio] = append(pending[2-prio], posted{task.ID, item})
		}
		var queries []*contract.Query
		for len(queries) < 4 {
			// Some drawn schemas are not valid (a type named twice).
			if text := postgres.RandomQuery(rng, 3); compiles(text) {
				queries = append(queries, contract.NewQuery(t, text))
			}
		}
		for range 30 {
			q := queries[rng.IntN(len(queries))]
			want, wantItem := "", json.RawMessage(nil)
		find:
			for band := range pending {
				for i, p := range pending[band] {
					if q.Match(p.item) {
						want, wantItem = p.id, p.item
						pending[band] = append(pending[band][:i:i], pending[band][i+1:]...)
						break find
					}
				}
			}
			if got := claimWith(t, mem, ref, q, now); got != want {
				t.Fatalf("round %d: the memory store claimed %q under %s, want %q %s", round, got, q.Key(), want, wantItem)
			}
			if got := claimWith(t, pg, ref, q, now); got != want {
				t.Fatalf("round %d: PostgreSQL claimed %q under %s, want %q", round, got, q.Key(), want)
			}
		}
	}
}

func compiles(text string) bool {
	_, err := schema.Compile(json.RawMessage(text))
	return err == nil
}

// counting is a claim query that counts the items Match is asked about.
type counting struct {
	q     *contract.Query
	calls int
}

func (c *counting) Key() string            { return c.q.Key() }
func (c *counting) Query() json.RawMessage { return c.q.Query() }
func (c *counting) Match(item json.RawMessage) bool {
	c.calls++
	return c.q.Match(item)
}

// hidden is a claim query whose schema the store cannot see.
type hidden struct{ ports.Matcher }

// The filter runs in SQL: of 1000 pending tasks of which 5 are images, an
// image claim fetches only images, and with an exact translation tests
// none in Go; a query the store cannot read is tested on every candidate.
func TestClaimQueryFiltersInSQL(t *testing.T) {
	s := mustOpen(t, pgtest.Database(t))
	ref := domain.QueueRef{Host: "task.example.com", Queue: "resize"}
	for n := range 1000 {
		kind := "video"
		if n%200 == 199 {
			kind = "image"
		}
		task, _ := domain.Post(fmt.Sprintf("%016x", n), ref.Host, ref.Queue, json.RawMessage(fmt.Sprintf(`{"kind":%q,"n":%d}`, kind, n)), "alice", epoch.Add(time.Duration(n)*time.Millisecond))
		if err := s.Create(context.Background(), task, nil); err != nil {
			t.Fatal(err)
		}
	}
	now := epoch.Add(time.Hour)
	exact := &counting{q: contract.NewQuery(t, `{"type":"object","properties":{"kind":{"const":"image"}},"required":["kind"]}`)}
	if got := claimWith(t, s, ref, exact, now); got != fmt.Sprintf("%016x", 199) {
		t.Fatalf("exact image claim took %q", got)
	}
	if exact.calls != 0 {
		t.Errorf("an exact translation still ran Match %d times", exact.calls)
	}
	// "pattern" is not translated: Match judges what the SQL lets through.
	partial := &counting{q: contract.NewQuery(t, `{"properties":{"kind":{"const":"image","pattern":"^im"}},"required":["kind"]}`)}
	if got := claimWith(t, s, ref, partial, now); got != fmt.Sprintf("%016x", 399) {
		t.Fatalf("image claim took %q", got)
	}
	if partial.calls != 1 {
		t.Errorf("a partial translation ran Match %d times, want once (only images come through)", partial.calls)
	}
	blind := &counting{q: contract.NewQuery(t, `{"properties":{"kind":{"const":"image"}},"required":["kind"]}`)}
	if got := claimWith(t, s, ref, hidden{blind}, now); got != fmt.Sprintf("%016x", 599) {
		t.Fatalf("image claim took %q", got)
	}
	if blind.calls < 590 {
		t.Errorf("a query the store cannot read ran Match %d times, want one per candidate up to the image (≥ 590)", blind.calls)
	}
	none := &counting{q: contract.NewQuery(t, `{"properties":{"kind":{"const":"audio","pattern":"^a"}},"required":["kind"]}`)}
	if got := claimWith(t, s, ref, none, now); got != "" {
		t.Fatalf("audio claim took %q", got)
	}
	if none.calls != 0 {
		t.Errorf("no audio, yet Match ran %d times", none.calls)
	}
}
