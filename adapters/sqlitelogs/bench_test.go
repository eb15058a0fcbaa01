package sqlitelogs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/taskhoster/taskhoster/adapters/sqlitelogs"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/domain/tasklog"
)

// benchLines is the size of the store the page queries are measured on.
const benchLines = 1_000_000

// BenchmarkEvents measures one page of the browser's list on a store of a
// million lines: the unfiltered first page, a task's events, an event in
// one queue, and a page deep in the list. The store is filled once per run
// (the parent benchmark body runs once; the sub-benchmarks are timed).
//
//	go test -run '^$' -bench Events -benchtime 2s ./adapters/sqlitelogs
func BenchmarkEvents(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	s, err := sqlitelogs.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	someID := fill(b, s, benchLines)
	b.Logf("filled %d lines in %v", benchLines, time.Since(start).Round(time.Millisecond))
	// Reopen, as the browser would after a pull: closing a writer refreshes
	// the planner's statistics, and the plans should stay right with them.
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	if s, err = sqlitelogs.OpenReader(dir); err != nil {
		b.Fatal(err)
	}
	defer s.Close()

	// A position half-way down the unfiltered list, for the deep page.
	deep := tasklog.Position{Millis: benchStart().Add(benchLines / 2 * benchStep).UnixMilli(), Seq: benchLines / 2}

	cases := []struct {
		name string
		q    tasklog.Query
	}{
		{"first-page", tasklog.Query{Limit: tasklog.DefaultLimit}},
		{"task-id", tasklog.Query{Filter: tasklog.Filter{ID: someID}, Limit: tasklog.DefaultLimit}},
		{"event+queue", tasklog.Query{Filter: tasklog.Filter{Event: domain.EventResult, Queue: "queue-3"}, Limit: tasklog.DefaultLimit}},
		{"rare-event+queue", tasklog.Query{Filter: tasklog.Filter{Event: domain.EventTimeout, Queue: "queue-0"}, Limit: tasklog.DefaultLimit}},
		{"worker+time-range", tasklog.Query{Filter: tasklog.Filter{Worker: "box-7",
			From: benchStart().Add(benchLines / 4 * benchStep), To: benchStart().Add(benchLines / 2 * benchStep)}, Limit: tasklog.DefaultLimit}},
		{"deep-page", tasklog.Query{Before: &deep, Limit: tasklog.DefaultLimit}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			page, err := s.Events(ctx, tc.q)
			if err != nil {
				b.Fatal(err)
			}
			if len(page.Lines) == 0 {
				b.Fatalf("%s: empty page", tc.name)
			}
			for b.Loop() {
				if _, err := s.Events(ctx, tc.q); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The synthetic history: one event every benchStep from benchStart.
const benchStep = 250 * time.Millisecond

func benchStart() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }

// fill stores n synthetic lines of tasks spread over 10 queues of 2 hosts,
// each task a trail posted, claimed, progress, result, fetched, cleaned
// (every 50th one times out instead), interleaved in time, and returns a
// task id from the middle. It commits 10,000 lines per transaction.
func fill(tb testing.TB, s *sqlitelogs.Store, n int) (someID string) {
	tb.Helper()
	ctx := context.Background()
	trail := []domain.EventKind{domain.EventPosted, domain.EventClaimed, domain.EventProgress,
		domain.EventResult, domain.EventFetched, domain.EventCleaned}
	const batch = 10_000
	const interleave = 16 // tasks in flight at once
	lines := make([]tasklog.Line, 0, batch)
	for i := 0; i < n; i++ {
		// Event i belongs to task (i / (len(trail)*interleave))*interleave + i%interleave.
		round, slot := i/(len(trail)*interleave), i%interleave
		task := round*interleave + slot
		step := (i / interleave) % len(trail)
		ev := trail[step]
		if task%50 == 0 && step >= 3 {
			ev = domain.EventTimeout
		}
		at := benchStart().Add(time.Duration(i) * benchStep)
		id := fmt.Sprintf("%016x", uint64(task)*0x9e3779b97f4a7c15)
		if i == n/2 {
			someID = id
		}
		worker := ""
		if step >= 1 && step <= 3 {
			worker = fmt.Sprintf("box-%d", task%40)
		}
		l := tasklog.Line{
			Key:      tasklog.Key{Source: "bench", Day: at.Format(time.DateOnly), Offset: int64(i) * 300},
			T:        at.Unix(),
			At:       at,
			Host:     fmt.Sprintf("host-%d.example.com", task%2),
			Queue:    fmt.Sprintf("queue-%d", task%10),
			ID:       id,
			Event:    ev,
			Status:   domain.Processing,
			Attempts: 1,
			Worker:   worker,
			Bytes:    tasklog.Sizes{Item: 74, Progress: 14, Result: 2048},
		}
		l.Raw = fmt.Sprintf(`{"t":%d,"at":%q,"host":%q,"queue":%q,"id":%q,"event":%q,"status":"processing","attempts":1,"worker":%q,"bytes":{"item":74,"progress":14,"result":2048,"error":0},"archived":[]}`,
			l.T, at.Format("2006-01-02T15:04:05.000Z"), l.Host, l.Queue, l.ID, l.Event, l.Worker)
		lines = append(lines, l)
		if len(lines) == batch || i == n-1 {
			// One cursor per batch stands in for the day files' cursors.
			if _, err := s.Commit(ctx, "bench", "fill", tasklog.Cursor{Offset: int64(i)}, lines); err != nil {
				tb.Fatal(err)
			}
			lines = lines[:0]
		}
	}
	return someID
}
