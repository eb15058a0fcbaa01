package sqlitelogs_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/adapters/sqlitelogs"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/domain/tasklog"
)

func mustOpen(tb testing.TB) *sqlitelogs.Store {
	tb.Helper()
	s, err := sqlitelogs.Open(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// t0 is the time of the first test line.
func t0() time.Time { return time.Date(2026, 7, 26, 9, 0, 0, 0, time.UTC) }

// line makes the event line at offset off of day file "2026-07-26", at
// t0 + off seconds, of task id (a number made into 16 hex digits).
func line(off int64, task int, event domain.EventKind, opts ...func(*tasklog.Line)) tasklog.Line {
	at := t0().Add(time.Duration(off) * time.Second)
	l := tasklog.Line{
		Key:    tasklog.Key{Source: "task.example.com", Day: "2026-07-26", Offset: off},
		T:      at.Unix(),
		At:     at,
		Host:   "task.example.com",
		Queue:  "resize",
		ID:     fmt.Sprintf("%016x", task),
		Event:  event,
		Status: domain.Pending,
		Bytes:  tasklog.Sizes{Item: 74},
	}
	for _, o := range opts {
		o(&l)
	}
	l.Raw = fmt.Sprintf(`{"t":%d,"id":%q,"event":%q}`, l.T, l.ID, l.Event)
	return l
}

func mustCommit(tb testing.TB, s *sqlitelogs.Store, next tasklog.Cursor, lines ...tasklog.Line) int {
	tb.Helper()
	n, err := s.Commit(context.Background(), "task.example.com", "2026-07-26", next, lines)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// all lists every stored event, newest first, by walking the pages.
func all(tb testing.TB, s *sqlitelogs.Store, f tasklog.Filter) []tasklog.Line {
	tb.Helper()
	var out []tasklog.Line
	q := tasklog.Query{Filter: f, Limit: 3}
	for {
		page, err := s.Events(context.Background(), q)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, page.Lines...)
		if page.Older == nil {
			return out
		}
		q.Before = page.Older
	}
}

func offsets(lines []tasklog.Line) []int64 {
	var out []int64
	for _, l := range lines {
		out = append(out, l.Key.Offset)
	}
	return out
}

func TestCommitIsIdempotent(t *testing.T) {
	s := mustOpen(t)
	batch := []tasklog.Line{line(0, 1, domain.EventPosted), line(100, 1, domain.EventClaimed), line(200, 2, domain.EventPosted)}
	if got := mustCommit(t, s, tasklog.Cursor{Offset: 300}, batch...); got != 3 {
		t.Fatalf("first commit added %d, want 3", got)
	}
	if got := mustCommit(t, s, tasklog.Cursor{Offset: 300}, batch...); got != 0 {
		t.Errorf("second commit of the same lines added %d, want 0", got)
	}
	// An overlapping batch adds only the line it did not have.
	if got := mustCommit(t, s, tasklog.Cursor{Offset: 400}, batch[2], line(300, 2, domain.EventClaimed)); got != 1 {
		t.Errorf("overlapping commit added %d, want 1", got)
	}
	if diff := cmp.Diff([]int64{300, 200, 100, 0}, offsets(all(t, s, tasklog.Filter{}))); diff != "" {
		t.Errorf("stored lines (-want +got):\n%s", diff)
	}
}

func TestCursorResumesAndNeverMovesBack(t *testing.T) {
	s := mustOpen(t)
	ctx := context.Background()
	cur := func() tasklog.Cursor {
		t.Helper()
		c, err := s.Cursor(ctx, "task.example.com", "2026-07-26")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if got := cur(); got != (tasklog.Cursor{}) {
		t.Fatalf("cursor of an unread day = %+v, want zero", got)
	}
	mustCommit(t, s, tasklog.Cursor{Offset: 0, Skip: 2}, line(0, 1, domain.EventPosted), line(100, 1, domain.EventClaimed))
	if got, want := cur(), (tasklog.Cursor{Offset: 0, Skip: 2}); got != want {
		t.Errorf("after a partial batch: cursor %+v, want %+v", got, want)
	}
	mustCommit(t, s, tasklog.Cursor{Offset: 250}, line(200, 1, domain.EventResult))
	// A slower pull that started earlier commits an older cursor: ignored.
	mustCommit(t, s, tasklog.Cursor{Offset: 0, Skip: 1}, line(0, 1, domain.EventPosted))
	if got, want := cur(), (tasklog.Cursor{Offset: 250}); got != want {
		t.Errorf("cursor %+v, want %+v", got, want)
	}
	// Another source's and another day's cursors are their own.
	if c, err := s.Cursor(ctx, "other.example.com", "2026-07-26"); err != nil || c != (tasklog.Cursor{}) {
		t.Errorf("other source's cursor = %+v, %v", c, err)
	}
}

func TestPayloadsAreWantedStoredAndRefetched(t *testing.T) {
	s := mustOpen(t)
	ctx := context.Background()
	archived := func(kinds ...string) func(*tasklog.Line) {
		return func(l *tasklog.Line) { l.Archived = kinds }
	}
	wanted := func() []tasklog.PayloadRef {
		t.Helper()
		refs, err := s.Wanted(ctx, "task.example.com")
		if err != nil {
			t.Fatal(err)
		}
		return refs
	}

	mustCommit(t, s, tasklog.Cursor{Offset: 200},
		line(0, 1, domain.EventPosted, archived("item")),
		line(100, 1, domain.EventProgress, archived("progress")))
	want := []tasklog.PayloadRef{
		{Source: "task.example.com", Host: "task.example.com", Queue: "resize", ID: "0000000000000001", File: "item.json", Want: 1},
		{Source: "task.example.com", Host: "task.example.com", Queue: "resize", ID: "0000000000000001", File: "progress.jsonl", Want: 1},
	}
	if diff := cmp.Diff(want, wanted()); diff != "" {
		t.Fatalf("wanted (-want +got):\n%s", diff)
	}
	for _, ref := range want {
		if err := s.SavePayload(ctx, ref, []byte(`{"n":1}`)); err != nil {
			t.Fatal(err)
		}
	}
	if got := wanted(); len(got) != 0 {
		t.Fatalf("wanted after saving = %+v, want none", got)
	}

	// A second progress appends to progress.jsonl: fetch it again. A body
	// fetched for the first progress does not count for the second.
	mustCommit(t, s, tasklog.Cursor{Offset: 300}, line(200, 1, domain.EventProgress, archived("progress")))
	refs := wanted()
	if len(refs) != 1 || refs[0].File != "progress.jsonl" || refs[0].Want != 2 {
		t.Fatalf("wanted after a second progress = %+v", refs)
	}
	if err := s.SavePayload(ctx, want[1], []byte("stale\n")); err != nil {
		t.Fatal(err)
	}
	if len(wanted()) != 1 {
		t.Errorf("a stale body satisfied a newer want")
	}
	if err := s.SavePayload(ctx, refs[0], []byte("{\"n\":1}\n{\"n\":2}\n")); err != nil {
		t.Fatal(err)
	}
	body, err := s.Payload(ctx, "task.example.com", "resize", "0000000000000001", "progress.jsonl")
	if err != nil || string(body) != "{\"n\":1}\n{\"n\":2}\n" {
		t.Errorf("progress.jsonl = %q, %v", body, err)
	}

	// A body that aged out on the server before it was fetched: stop asking,
	// keep nothing, say so.
	mustCommit(t, s, tasklog.Cursor{Offset: 400}, line(300, 1, domain.EventResult, archived("result")))
	refs = wanted()
	if err := s.PayloadGone(ctx, refs[0]); err != nil {
		t.Fatal(err)
	}
	if len(wanted()) != 0 {
		t.Errorf("a gone payload is still wanted")
	}
	if _, err := s.Payload(ctx, "task.example.com", "resize", "0000000000000001", "result.json"); domain.KindOf(err) != domain.KindNotFound {
		t.Errorf("gone result.json: err = %v, want KindNotFound", err)
	}
	got, err := s.Payloads(ctx, "task.example.com", "resize", "0000000000000001")
	if err != nil {
		t.Fatal(err)
	}
	wantInfo := []tasklog.Payload{{File: "item.json", Size: 7, Stored: true},
		{File: "progress.jsonl", Size: 16, Stored: true}, {File: "result.json"}}
	if diff := cmp.Diff(wantInfo, got); diff != "" {
		t.Errorf("payloads (-want +got):\n%s", diff)
	}
}

// TestEventsFilters checks each filter against the same selection done in
// Go over every line.
func TestEventsFilters(t *testing.T) {
	s := mustOpen(t)
	var lines []tasklog.Line
	trail := []domain.EventKind{domain.EventPosted, domain.EventClaimed, domain.EventResult}
	for i := range 30 {
		task := i / 3
		l := line(int64(i*100), task, trail[i%3], func(l *tasklog.Line) {
			l.Queue = []string{"resize", "thumbnail"}[task%2]
			l.Host = []string{"task.example.com", "b.example.com"}[task%3/2]
			if l.Event != domain.EventPosted {
				l.Worker = fmt.Sprintf("box-%d", task%2)
			}
		})
		lines = append(lines, l)
	}
	mustCommit(t, s, tasklog.Cursor{Offset: 3000}, lines...)

	at := func(off int) time.Time { return t0().Add(time.Duration(off*100) * time.Second) }
	cases := []struct {
		name  string
		f     tasklog.Filter
		match func(tasklog.Line) bool
	}{
		{"none", tasklog.Filter{}, func(tasklog.Line) bool { return true }},
		{"host", tasklog.Filter{Host: "b.example.com"}, func(l tasklog.Line) bool { return l.Host == "b.example.com" }},
		{"queue", tasklog.Filter{Queue: "thumbnail"}, func(l tasklog.Line) bool { return l.Queue == "thumbnail" }},
		{"task id", tasklog.Filter{ID: fmt.Sprintf("%016x", 4)}, func(l tasklog.Line) bool { return l.ID == fmt.Sprintf("%016x", 4) }},
		{"event", tasklog.Filter{Event: domain.EventResult}, func(l tasklog.Line) bool { return l.Event == domain.EventResult }},
		{"worker", tasklog.Filter{Worker: "box-1"}, func(l tasklog.Line) bool { return l.Worker == "box-1" }},
		{"from", tasklog.Filter{From: at(20)}, func(l tasklog.Line) bool { return !l.At.Before(at(20)) }},
		{"to", tasklog.Filter{To: at(5)}, func(l tasklog.Line) bool { return l.At.Before(at(5)) }},
		{"event in a queue within a time range", tasklog.Filter{Event: domain.EventClaimed, Queue: "resize", From: at(3), To: at(25)},
			func(l tasklog.Line) bool {
				return l.Event == domain.EventClaimed && l.Queue == "resize" && !l.At.Before(at(3)) && l.At.Before(at(25))
			}},
		{"no match", tasklog.Filter{Queue: "nothing"}, func(tasklog.Line) bool { return false }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var want []int64
			for _, l := range slices.Backward(lines) {
				if tc.match(l) {
					want = append(want, l.Key.Offset)
				}
			}
			if diff := cmp.Diff(want, offsets(all(t, s, tc.f))); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEventsRefusesBadQueries(t *testing.T) {
	s := mustOpen(t)
	for _, q := range []tasklog.Query{
		{Limit: 0},
		{Limit: tasklog.MaxLimit + 1},
		{Limit: 10, Filter: tasklog.Filter{ID: "not-an-id"}},
		{Limit: 10, Filter: tasklog.Filter{Queue: "Bad Queue"}},
		{Limit: 10, Filter: tasklog.Filter{From: t0(), To: t0()}},
		{Limit: 10, Before: &tasklog.Position{}, After: &tasklog.Position{}},
	} {
		if _, err := s.Events(context.Background(), q); domain.KindOf(err) != domain.KindInvalid {
			t.Errorf("Events(%+v): err = %v, want KindInvalid", q, err)
		}
	}
}

// TestPagesStayPutWhileLinesArrive: the page after a position holds the
// same events however many lines are pulled in the meantime, and walking
// every page shows every event once.
func TestPagesStayPutWhileLinesArrive(t *testing.T) {
	s := mustOpen(t)
	ctx := context.Background()
	var lines []tasklog.Line
	for i := range 25 {
		lines = append(lines, line(int64(i*10), i, domain.EventPosted))
	}
	mustCommit(t, s, tasklog.Cursor{Offset: 250}, lines...)

	first, err := s.Events(ctx, tasklog.Query{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.Events(ctx, tasklog.Query{Limit: 10, Before: first.Older})
	if err != nil {
		t.Fatal(err)
	}

	// New lines arrive: newer ones, and (another day file pulled late)
	// some with the same times as lines already listed.
	mustCommit(t, s, tasklog.Cursor{Offset: 400}, line(300, 90, domain.EventPosted), line(310, 91, domain.EventPosted))
	late := line(120, 92, domain.EventPosted, func(l *tasklog.Line) { l.Key.Day = "2026-07-25" })
	if _, err := s.Commit(ctx, "task.example.com", "2026-07-25", tasklog.Cursor{Offset: 1}, []tasklog.Line{late}); err != nil {
		t.Fatal(err)
	}

	again, err := s.Events(ctx, tasklog.Query{Limit: 10, Before: first.Older})
	if err != nil {
		t.Fatal(err)
	}
	// The late line has the time of offset 120's line and arrived after it,
	// so it sorts just before it in the newest-first list, on this page.
	want := []int64{140, 130, 120, 120, 110, 100, 90, 80, 70, 60}
	if diff := cmp.Diff(want, offsets(again.Lines)); diff != "" {
		t.Errorf("second page after new lines (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(offsets(second.Lines)[:2], offsets(again.Lines)[:2]); diff != "" {
		t.Errorf("second page moved (-before +after):\n%s", diff)
	}
	// Back to the newer page from there: the first page as it was.
	back, err := s.Events(ctx, tasklog.Query{Limit: 10, After: again.Newer})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(offsets(first.Lines), offsets(back.Lines)); diff != "" {
		t.Errorf("newer page (-first +back):\n%s", diff)
	}

	// Every event exactly once, newest first.
	got := all(t, s, tasklog.Filter{})
	if len(got) != 28 {
		t.Errorf("walked %d events, want 28", len(got))
	}
	seen := map[int64]bool{}
	for i, l := range got {
		if seen[l.Seq] {
			t.Errorf("event %d listed twice", l.Seq)
		}
		seen[l.Seq] = true
		if i > 0 && tasklog.PositionOf(got[i-1]).Millis < tasklog.PositionOf(l).Millis {
			t.Errorf("event %d is newer than the one before it", l.Seq)
		}
	}
}

func TestTrailIsOldestFirst(t *testing.T) {
	s := mustOpen(t)
	mustCommit(t, s, tasklog.Cursor{Offset: 500},
		line(0, 1, domain.EventPosted), line(100, 2, domain.EventPosted),
		line(200, 1, domain.EventClaimed, func(l *tasklog.Line) { l.Worker = "box-1" }),
		line(300, 1, domain.EventResult, func(l *tasklog.Line) { l.Bytes.Result = 2048; l.Archived = []string{"result"} }))
	got, err := s.Trail(context.Background(), "task.example.com", "resize", "0000000000000001")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int64{0, 200, 300}, offsets(got)); diff != "" {
		t.Fatalf("trail (-want +got):\n%s", diff)
	}
	last := got[2]
	if last.Bytes.Result != 2048 || !slices.Equal(last.Archived, []string{"result"}) || !last.At.Equal(t0().Add(300*time.Second)) {
		t.Errorf("stored line lost fields: %+v", last)
	}
	if got[1].Worker != "box-1" || got[0].Worker != "" {
		t.Errorf("workers = %q, %q", got[0].Worker, got[1].Worker)
	}
}

func TestReaderCannotWriteAndNeedsAStore(t *testing.T) {
	dir := t.TempDir()
	if _, err := sqlitelogs.OpenReader(dir); domain.KindOf(err) != domain.KindNotFound {
		t.Fatalf("OpenReader of an empty folder: err = %v, want KindNotFound", err)
	}
	w, err := sqlitelogs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	mustCommit(t, w, tasklog.Cursor{Offset: 1}, line(0, 1, domain.EventPosted))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := sqlitelogs.OpenReader(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := all(t, r, tasklog.Filter{}); len(got) != 1 {
		t.Errorf("reader sees %d lines, want 1", len(got))
	}
	if _, err := r.Commit(context.Background(), "x", "2026-07-26", tasklog.Cursor{Offset: 2}, nil); err == nil {
		t.Errorf("a reader committed a cursor")
	}
}
