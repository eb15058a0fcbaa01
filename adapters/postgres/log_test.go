package postgres_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskhoster/taskhoster/adapters/eventlog"
	"github.com/taskhoster/taskhoster/adapters/httpapi"
	"github.com/taskhoster/taskhoster/adapters/postgres"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/internal/pgtest"
)

var _ httpapi.LogReader = (*postgres.Log)(nil)

// stage is a test's app.StagedEvent: the event in the context, and
// whether the store said it wrote its line.
type stageKey struct{}

type stagedEv struct {
	ev      *domain.Event
	archive bool
	logged  bool
}

func staged(ctx context.Context) (domain.Event, bool, func(), bool) {
	st, ok := ctx.Value(stageKey{}).(*stagedEv)
	if !ok || st.ev.Kind == "" {
		return domain.Event{}, false, nil, false
	}
	return *st.ev, st.archive, func() { st.logged = true }, true
}

func stage(ev *domain.Event) (context.Context, *stagedEv) {
	st := &stagedEv{ev: ev}
	return context.WithValue(context.Background(), stageKey{}, st), st
}

func postEv(n int) (domain.Task, domain.Event) {
	return domain.Post(fmt.Sprintf("%016x", 0xc0000000+n), "task.example.com", "resize", json.RawMessage(`{}`), "alice", epoch)
}

func keepAll(string, string) bool { return true }

// A change's line is written with it; the log API reads the lines back
// byte for byte, with the offsets and refusals of a day file.
func TestLogLinesWithChanges(t *testing.T) {
	s := mustOpen(t, pgtest.Database(t))
	s.WriteLines(staged)
	l := s.Log()

	task, posted := postEv(1)
	ctx, st := stage(&posted)
	if err := s.Create(ctx, task, nil); err != nil {
		t.Fatal(err)
	}
	if !st.logged {
		t.Fatal("the posted line was not written with the task")
	}
	var claimed domain.Event
	ctx, _ = stage(&claimed)
	if _, err := s.Update(ctx, domain.KeyOf(task), func(tk *domain.Task) error {
		var err error
		*tk, claimed, err = tk.Claim("box-1", time.Minute, epoch.Add(time.Second))
		return err
	}, nil); err != nil {
		t.Fatal(err)
	}
	// A refused change writes nothing.
	var refused domain.Event
	ctx, _ = stage(&refused)
	if _, err := s.Update(ctx, domain.KeyOf(task), func(tk *domain.Task) error {
		refused = domain.Event{Kind: domain.EventClaimed, At: epoch, Task: *tk}
		return domain.ErrNotPending
	}, nil); !errors.Is(err, domain.ErrNotPending) {
		t.Fatalf("refused update: %v", err)
	}
	// An event without a change of its own (Append) goes after.
	other, otherPosted := postEv(2)
	if err := l.Append(context.Background(), otherPosted, false); err != nil {
		t.Fatal(err)
	}

	want := [][]byte{eventlog.EncodeLine(posted, nil), eventlog.EncodeLine(claimed, nil), eventlog.EncodeLine(otherPosted, nil)}
	all := bytes.Join(want, nil)
	day := eventlog.DayOf(epoch)
	days, err := l.Days()
	if err != nil {
		t.Fatal(err)
	}
	if len(days) != 1 || days[0].Day != day || days[0].Size != int64(len(all)) {
		t.Fatalf("days = %+v, want [{%s %d}]", days, day, len(all))
	}
	got, next, err := l.ReadLines(day, 0, 1<<20, keepAll)
	if err != nil || !bytes.Equal(got, all) || next != int64(len(all)) {
		t.Fatalf("read from 0 = %q, %d, %v; want %q, %d", got, next, err, all, len(all))
	}
	// From the second line's offset; a limit that holds one line only.
	off := int64(len(want[0]))
	got, next, err = l.ReadLines(day, off, len(want[1])+5, keepAll)
	if err != nil || !bytes.Equal(got, want[1]) || next != off+int64(len(want[1])) {
		t.Fatalf("read from %d = %q, %d, %v; want the claimed line", off, got, next, err)
	}
	// Filtered lines are skipped, and counted in the next offset.
	got, next, err = l.ReadLines(day, 0, 1<<20, func(_, _ string) bool { return false })
	if err != nil || len(got) != 0 || next != int64(len(all)) {
		t.Fatalf("filtered read = %q, %d, %v", got, next, err)
	}
	// At the end: nothing, same offset.
	got, next, err = l.ReadLines(day, int64(len(all)), 1<<20, keepAll)
	if err != nil || len(got) != 0 || next != int64(len(all)) {
		t.Fatalf("read at the end = %q, %d, %v", got, next, err)
	}
	for _, bad := range []int64{1, off + 3, int64(len(all)) + 1} {
		if _, _, err := l.ReadLines(day, bad, 1<<20, keepAll); !isCode(err, domain.CodeInvalidOffset) {
			t.Errorf("offset %d: %v, want invalid_offset", bad, err)
		}
	}
	for _, bad := range []string{"2020-01-01", "yesterday", "../x"} {
		if _, _, err := l.ReadLines(bad, 0, 1<<20, keepAll); !isCode(err, domain.CodeNotFound) {
			t.Errorf("day %q: %v, want not_found", bad, err)
		}
	}
	if _, err := l.OpenPayload(other.Host, other.Queue, other.ID, eventlog.ItemFile); !isCode(err, domain.CodeNotFound) {
		t.Errorf("payload: %v, want not_found", err)
	}
	// Prune keeps the window and drops what is older.
	if err := l.Prune(context.Background(), epoch.Add(24*time.Hour), 2); err != nil {
		t.Fatal(err)
	}
	if days, _ := l.Days(); len(days) != 1 {
		t.Errorf("after a prune keeping 2 days: %+v", days)
	}
	if err := l.Prune(context.Background(), epoch.Add(48*time.Hour), 2); err != nil {
		t.Fatal(err)
	}
	if days, _ := l.Days(); len(days) != 0 {
		t.Errorf("after a prune past the day: %+v", days)
	}
}

// A change whose line the database refuses is not stored, and a line
// whose change the database refuses is not written: they commit together
// or not at all. (Triggers refuse them, after the other statement of the
// transaction ran.)
func TestLogLineAndChangeCommitTogether(t *testing.T) {
	url := pgtest.Database(t)
	s := mustOpen(t, url)
	s.WriteLines(staged)
	l := s.Log()
	admin, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	// refuse(table, when) makes the database refuse the rows of table
	// that when (an SQL condition on NEW) picks, until the returned
	// function lifts it.
	refuse := func(table, when string) func() {
		t.Helper()
		if _, err := admin.Exec(context.Background(), `CREATE OR REPLACE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN IF `+when+` THEN RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$;
			CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON `+table+` FOR EACH ROW EXECUTE FUNCTION refuse()`); err != nil {
			t.Fatal(err)
		}
		return func() {
			if _, err := admin.Exec(context.Background(), `DROP TRIGGER refuse ON `+table); err != nil {
				t.Fatal(err)
			}
		}
	}
	count := func(query string) int {
		t.Helper()
		var n int
		if err := admin.QueryRow(context.Background(), query).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// A post whose line is refused, archiving its item: no task, no body.
	task, posted := postEv(1)
	lift := refuse("event_lines", `convert_from(NEW.line, 'UTF8') LIKE '%posted%'`)
	ctx, st := stage(&posted)
	st.archive = true
	if err := s.Create(ctx, task, nil); err == nil {
		t.Fatal("a create whose line was refused was acknowledged")
	}
	if _, err := s.Get(context.Background(), domain.KeyOf(task)); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("get after a refused line: %v, want not found", err)
	}
	if n := count(`SELECT count(*) FROM payloads`); n != 0 {
		t.Errorf("%d archived bodies after a refused line, want 0", n)
	}
	if st.logged {
		t.Error("the store said it wrote a line that was refused")
	}
	lift()

	// Posted for real; then a claim whose line is refused.
	ctx, _ = stage(&posted)
	if err := s.Create(ctx, task, nil); err != nil {
		t.Fatal(err)
	}
	claim := func(ctx context.Context) error {
		var claimed domain.Event
		*ctx.Value(stageKey{}).(*stagedEv) = stagedEv{ev: &claimed}
		_, err := s.Update(ctx, domain.KeyOf(task), func(tk *domain.Task) error {
			var err error
			*tk, claimed, err = tk.Claim("box-1", time.Minute, epoch.Add(time.Second))
			return err
		}, nil)
		return err
	}
	lift = refuse("event_lines", `convert_from(NEW.line, 'UTF8') LIKE '%claimed%'`)
	if err := claim(context.WithValue(context.Background(), stageKey{}, &stagedEv{})); err == nil {
		t.Fatal("a claim whose line was refused was acknowledged")
	}
	lift()
	got, err := s.Get(context.Background(), domain.KeyOf(task))
	if err != nil || got.Status != domain.Pending {
		t.Errorf("after a claim whose line was refused: %v %v, want pending", got.Status, err)
	}
	// A claim whose row is refused: no line.
	lift = refuse("tasks", `NEW.status = 'processing'`)
	if err := claim(context.WithValue(context.Background(), stageKey{}, &stagedEv{})); err == nil {
		t.Fatal("a claim whose row was refused was acknowledged")
	}
	lift()
	lines, next, err := l.ReadLines(eventlog.DayOf(epoch), 0, 1<<20, keepAll)
	if want := eventlog.EncodeLine(posted, nil); err != nil || !bytes.Equal(lines, want) || next != int64(len(want)) {
		t.Errorf("lines after the refused claims = %q, %d, %v; want the posted line only", lines, next, err)
	}
	// Neither refusal left a connection in a transaction: the claim
	// goes through now, line and all.
	st = &stagedEv{}
	if err := claim(context.WithValue(context.Background(), stageKey{}, st)); err != nil || !st.logged {
		t.Fatalf("claim = %v (line written: %v)", err, st.logged)
	}
	if n := count(`SELECT count(*) FROM event_lines`); n != 2 {
		t.Errorf("%d lines, want posted and claimed", n)
	}
}

func isCode(err error, code domain.Code) bool {
	var de *domain.Error
	return errors.As(err, &de) && de.Code == code
}

// With archivePayloads, an event's bodies are written with its line, which
// names them; the log API's OpenPayload reads them back; Prune drops a
// task's archive once its last body is older than the window.
func TestLogArchivesPayloads(t *testing.T) {
	s := mustOpen(t, pgtest.Database(t))
	s.WriteLines(staged)
	l := s.Log()

	task, posted := postEv(1)
	ctx, st := stage(&posted)
	st.archive = true
	if err := s.Create(ctx, task, nil); err != nil {
		t.Fatal(err)
	}
	var claimed domain.Event
	ctx, st = stage(&claimed)
	st.archive = true
	task, err := s.Update(ctx, domain.KeyOf(task), func(tk *domain.Task) error {
		var err error
		*tk, claimed, err = tk.Claim("box-1", time.Minute, epoch.Add(time.Second))
		return err
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range []string{`{"percent":40}`, `{"percent":90}`} {
		ev := domain.Event{Kind: domain.EventProgress, At: epoch.Add(time.Duration(2+i) * time.Second), Worker: "box-1"}
		ctx, st = stage(&ev)
		st.archive = true
		if _, err := s.Update(ctx, domain.KeyOf(task), func(tk *domain.Task) error {
			tk.Progress = json.RawMessage(p)
			ev.Task = *tk
			return nil
		}, nil); err != nil {
			t.Fatal(err)
		}
	}
	lines, _, err := l.ReadLines(eventlog.DayOf(epoch), 0, 1<<20, keepAll)
	if err != nil {
		t.Fatal(err)
	}
	var archived [][]string
	for _, line := range bytes.SplitAfter(lines, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var v struct{ Archived []string }
		if err := json.Unmarshal(line, &v); err != nil {
			t.Fatal(err)
		}
		archived = append(archived, v.Archived)
	}
	want := [][]string{{"item"}, {}, {"progress"}, {"progress"}}
	if fmt.Sprint(archived) != fmt.Sprint(want) {
		t.Errorf("archived = %v, want %v", archived, want)
	}
	for file, body := range map[string]string{
		eventlog.ItemFile:     `{}`,
		eventlog.ProgressFile: "{\"percent\":40}\n{\"percent\":90}\n",
	} {
		p, err := l.OpenPayload(task.Host, task.Queue, task.ID, file)
		if err != nil {
			t.Fatalf("open %s: %v", file, err)
		}
		got := make([]byte, p.Size())
		_, _ = p.ReadAt(got, 0)
		_ = p.Close()
		if string(got) != body || p.ModTime.IsZero() {
			t.Errorf("%s = %q (modified %v), want %q", file, got, p.ModTime, body)
		}
	}
	if _, err := l.OpenPayload(task.Host, task.Queue, task.ID, eventlog.ResultFile); !isCode(err, domain.CodeNotFound) {
		t.Errorf("result before any: %v, want not_found", err)
	}
	// The bodies are stamped with the database's time (now): a window
	// that ends before now keeps them, one that starts after drops them.
	if err := l.Prune(context.Background(), time.Now(), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := l.OpenPayload(task.Host, task.Queue, task.ID, eventlog.ItemFile); err != nil {
		t.Errorf("item within the window: %v", err)
	}
	if err := l.Prune(context.Background(), time.Now().Add(48*time.Hour), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := l.OpenPayload(task.Host, task.Queue, task.ID, eventlog.ItemFile); !isCode(err, domain.CodeNotFound) {
		t.Errorf("item past the window: %v, want not_found", err)
	}
}

// Lines written side by side while a reader follows the day from its
// X-Next-Offset: what it read, piece by piece, is the day as a whole read
// at the end (no line ever appears before an offset already read), and a
// task's lines are in its store order.
func TestLogReaderFollowingWriters(t *testing.T) {
	s := mustOpen(t, pgtest.Database(t))
	s.WriteLines(staged)
	l := s.Log()
	day := eventlog.DayOf(epoch)

	done := make(chan struct{})
	var followed bytes.Buffer
	var next int64
	read := func() {
		got, n, err := l.ReadLines(day, next, 1<<20, keepAll)
		if isCode(err, domain.CodeNotFound) {
			return // no line yet
		}
		if err != nil {
			t.Errorf("read from %d: %v", next, err)
			return
		}
		followed.Write(got)
		next = n
	}
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				for i := range 25 {
					task, posted := postEv(w*1000 + i)
					ctx, _ := stage(&posted)
					if err := s.Create(ctx, task, nil); err != nil {
						t.Error(err)
						return
					}
					var claimed domain.Event
					ctx, _ = stage(&claimed)
					if _, err := s.Update(ctx, domain.KeyOf(task), func(tk *domain.Task) error {
						var err error
						*tk, claimed, err = tk.Claim("box-1", time.Minute, epoch.Add(time.Second))
						return err
					}, nil); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}()
	for following := true; following; {
		select {
		case <-done:
			following = false
		default:
		}
		read()
	}
	read()
	all, end, err := l.ReadLines(day, 0, 1<<30, keepAll)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(followed.Bytes(), all) || end != next {
		t.Fatalf("followed %d bytes up to %d, the day holds %d up to %d", followed.Len(), next, len(all), end)
	}
	seen := make(map[string]string)
	lines := bytes.SplitAfter(all, []byte("\n"))
	for _, line := range lines[:len(lines)-1] {
		var v struct{ ID, Event string }
		if err := json.Unmarshal(line, &v); err != nil {
			t.Fatal(err)
		}
		if want := map[string]string{"": "posted", "posted": "claimed"}[seen[v.ID]]; v.Event != want {
			t.Errorf("task %s: %s after %q", v.ID, v.Event, seen[v.ID])
		}
		seen[v.ID] = v.Event
	}
	if len(seen) != 8*25 {
		t.Errorf("%d tasks logged, want %d", len(seen), 8*25)
	}
}

// An archived body asked for by an id no task can have (a path's %00 or
// %FF reach the handler decoded) is not found, as in the file archive,
// rather than a statement the database refuses (500).
func TestPayloadOfAnImpossibleIDIsNotFound(t *testing.T) {
	l := mustOpen(t, pgtest.Database(t)).Log()
	for _, id := range []string{"\x00000000000000001", "\xff000000000000001"} {
		if _, err := l.OpenPayload("task.example.com", "resize", id, eventlog.ItemFile); !isCode(err, domain.CodeNotFound) {
			t.Errorf("open payload of %q = %v, want not_found", id, err)
		}
	}
}
