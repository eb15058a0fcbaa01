package eventlog_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/adapters/eventlog"
	"github.com/taskhoster/taskhoster/domain"
)

func TestDaysListsDayFilesInOrder(t *testing.T) {
	dir := t.TempDir()
	r := eventlog.NewReader(dir)
	days, err := r.Days()
	if err != nil {
		t.Fatal(err)
	}
	if days == nil || len(days) != 0 {
		t.Errorf("Days without a tasks folder = %#v, want empty and not nil", days)
	}

	if err := os.MkdirAll(filepath.Join(dir, "tasks"), 0o755); err != nil {
		t.Fatal(err)
	}
	for day, content := range map[string]string{"2026-07-26": "{}\n{}\n", "2026-07-04": "{}\n", "2026-07-25": ""} {
		if err := os.WriteFile(dayFile(dir, day), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(t, filepath.Join(dir, "tasks", "notes.txt"))
	mustWrite(t, filepath.Join(dir, "tasks", "2026-02-30.jsonl"))
	if err := os.Mkdir(dayFile(dir, "2026-07-01"), 0o755); err != nil {
		t.Fatal(err)
	}

	days, err = r.Days()
	if err != nil {
		t.Fatal(err)
	}
	want := []eventlog.DayFile{{Day: "2026-07-04", Size: 3}, {Day: "2026-07-25", Size: 0}, {Day: "2026-07-26", Size: 6}}
	if diff := cmp.Diff(want, days); diff != "" {
		t.Errorf("days (-want +got):\n%s", diff)
	}
}

// Lines of two hosts and two queues, a fragment of a torn write that a later
// line ran into, and a last line still being written.
const (
	lineA1  = `{"t":1,"host":"a.example","queue":"q1","id":"0000000000000001","event":"posted"}` + "\n"
	lineB1  = `{"t":2,"host":"b.example","queue":"q1","id":"0000000000000002","event":"posted"}` + "\n"
	lineA2  = `{"t":3,"host":"a.example","queue":"q2","id":"0000000000000003","event":"posted"}` + "\n"
	torn    = `{"t":4,"host":"a.exa` + `{"t":5,"host":"a.example","queue":"q1","id":"0000000000000005","event":"claimed"}` + "\n"
	lineA3  = `{"t":6,"host":"a.example","queue":"q1","id":"0000000000000001","event":"claimed"}` + "\n"
	partial = `{"t":7,"host":"a.example","queue":"q1","id":"00000`
)

func writeDay(tb testing.TB, dir, day, content string) {
	tb.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "tasks"), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(dayFile(dir, day), []byte(content), 0o644); err != nil {
		tb.Fatal(err)
	}
}

func keepHost(host string, queues ...string) func(string, string) bool {
	return func(h, q string) bool {
		if h != host {
			return false
		}
		for _, want := range queues {
			if q == want {
				return true
			}
		}
		return len(queues) == 0
	}
}

func TestReadLinesReturnsWholeLinesOfReadableEvents(t *testing.T) {
	dir := t.TempDir()
	r := eventlog.NewReader(dir)
	whole := lineA1 + lineB1 + lineA2 + torn + lineA3
	writeDay(t, dir, day0, whole+partial)

	got, next, err := r.ReadLines(day0, 0, 4<<20, keepHost("a.example", "q1"))
	if err != nil {
		t.Fatal(err)
	}
	// Not b.example's line, not q2's, not the torn one, not the partial one.
	if want := lineA1 + lineA3; string(got) != want {
		t.Errorf("lines\n got %q\nwant %q", got, want)
	}
	if want := int64(len(whole)); next != want {
		t.Errorf("next offset %d, want %d (the start of the partial line)", next, want)
	}

	// Nothing new: the same offset again.
	got, again, err := r.ReadLines(day0, next, 4<<20, keepHost("a.example", "q1"))
	if err != nil || len(got) != 0 || again != next {
		t.Errorf("read at the partial line = %q, %d, %v; want nothing, %d", got, again, err, next)
	}

	// The line is finished: it comes whole on the next read.
	f, err := os.OpenFile(dayFile(dir, day0), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	rest := `0000000000007","event":"posted"}` + "\n"
	if _, err := f.WriteString(rest); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got, end, err := r.ReadLines(day0, next, 4<<20, keepHost("a.example", "q1"))
	if err != nil {
		t.Fatal(err)
	}
	if want := partial + rest; string(got) != want {
		t.Errorf("finished line\n got %q\nwant %q", got, want)
	}
	if want := int64(len(whole + partial + rest)); end != want {
		t.Errorf("next offset %d, want the file size %d", end, want)
	}
}

// With a small limit a client reads every line by asking from the offset it
// was given until the offset stops moving.
func TestReadLinesInPiecesUpToTheLimit(t *testing.T) {
	dir := t.TempDir()
	r := eventlog.NewReader(dir)
	content := lineA1 + lineB1 + lineA2 + lineA3
	writeDay(t, dir, day0, content)
	limit := len(lineA1) + 10 // one line and a bit of the next

	var got []byte
	var offsets []int64
	for offset := int64(0); ; {
		lines, next, err := r.ReadLines(day0, offset, limit, keepHost("a.example"))
		if err != nil {
			t.Fatal(err)
		}
		if len(lines) > limit {
			t.Fatalf("read %d bytes over a limit of %d", len(lines), limit)
		}
		got = append(got, lines...)
		if next == offset {
			break
		}
		offsets = append(offsets, next)
		offset = next
	}
	if want := lineA1 + lineA2 + lineA3; string(got) != want {
		t.Errorf("lines\n got %q\nwant %q", got, want)
	}
	a, b, c := int64(len(lineA1)), int64(len(lineB1)), int64(len(lineA2))
	if diff := cmp.Diff([]int64{a, a + b, a + b + c, int64(len(content))}, offsets); diff != "" {
		t.Errorf("offsets (-want +got):\n%s", diff)
	}

	// A line longer than the whole limit cannot be read in pieces.
	if _, _, err := r.ReadLines(day0, 0, 10, keepHost("a.example")); err == nil {
		t.Error("a line over the limit was not an error")
	}
}

func TestReadLinesChecksTheOffset(t *testing.T) {
	dir := t.TempDir()
	r := eventlog.NewReader(dir)
	content := lineA1 + lineA2 + partial
	writeDay(t, dir, day0, content)
	size := int64(len(content))
	tests := []struct {
		name   string
		offset int64
		ok     bool
	}{
		{"start", 0, true},
		{"second line", int64(len(lineA1)), true},
		{"partial line", int64(len(lineA1 + lineA2)), true},
		{"negative", -1, false},
		{"inside the first line", 1, false},
		{"at the newline", int64(len(lineA1)) - 1, false},
		{"inside the partial line", size - 1, false},
		{"the end, inside the partial line", size, false},
		{"past the end", size + 1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := r.ReadLines(day0, tc.offset, 4<<20, keepHost("a.example"))
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			assertError(t, err, domain.KindInvalid, "invalid_offset")
		})
	}

	// The end of a file of whole lines is where the next read starts.
	writeDay(t, dir, "2026-07-27", lineA1)
	got, next, err := r.ReadLines("2026-07-27", int64(len(lineA1)), 4<<20, keepHost("a.example"))
	if err != nil || len(got) != 0 || next != int64(len(lineA1)) {
		t.Errorf("read at the end = %q, %d, %v", got, next, err)
	}
}

func TestReadLinesOfAnUnknownDay(t *testing.T) {
	dir := t.TempDir()
	r := eventlog.NewReader(dir)
	writeDay(t, dir, day0, lineA1)
	if err := os.Mkdir(dayFile(dir, "2026-07-01"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, day := range []string{"2026-07-27", "2026-7-26", "2026-02-30", "../tasks/2026-07-26", "2026-07-26.jsonl", "", "2026-07-01"} {
		_, _, err := r.ReadLines(day, 0, 4<<20, keepHost("a.example"))
		assertError(t, err, domain.KindNotFound, "not_found")
	}
}

func TestOpenPayload(t *testing.T) {
	dir := t.TempDir()
	r := eventlog.NewReader(dir)
	folder := filepath.Join(dir, "tasks-payloads", "a.example", "q1", "0000000000000001")
	if err := os.MkdirAll(folder, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"item.json": `{"url":"x"}`,
		// A progress line is being appended: only the whole ones are served.
		"progress.jsonl": "{\"percent\":10}\n{\"percent\":20}\n{\"perc",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(folder, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	read := func(host, queue, id, name string) (string, error) {
		t.Helper()
		p, err := r.OpenPayload(host, queue, id, name)
		if err != nil {
			return "", err
		}
		defer p.Close()
		b, err := io.ReadAll(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b), nil
	}

	if got, err := read("a.example", "q1", "0000000000000001", "item.json"); err != nil || got != files["item.json"] {
		t.Errorf("item.json = %q, %v", got, err)
	}
	if got, err := read("a.example", "q1", "0000000000000001", "progress.jsonl"); err != nil || got != "{\"percent\":10}\n{\"percent\":20}\n" {
		t.Errorf("progress.jsonl = %q, %v", got, err)
	}
	for _, c := range [][4]string{
		{"a.example", "q1", "0000000000000001", "result.json"}, // not archived
		{"a.example", "q1", "0000000000000001", "notes.txt"},   // not a payload
		{"a.example", "q1", "0000000000000002", "item.json"},   // no such task
		{"a.example", "..", "0000000000000001", "item.json"},   // not a queue name
		{"a.example", "q1", "../q1/0000000000000001", "item.json"},
		{"../a.example", "q1", "0000000000000001", "item.json"},
		{"a.example", "q1", "0000000000000001", "../0000000000000001/item.json"},
	} {
		_, err := read(c[0], c[1], c[2], c[3])
		assertError(t, err, domain.KindNotFound, "not_found")
	}
}

func assertError(tb testing.TB, err error, kind domain.Kind, code domain.Code) {
	tb.Helper()
	var de *domain.Error
	if !errors.As(err, &de) {
		tb.Fatalf("error %v is not a *domain.Error", err)
	}
	if de.Kind != kind || de.Code != code {
		tb.Errorf("error %v: kind %v code %q, want %v %q", err, de.Kind, de.Code, kind, code)
	}
	if strings.Contains(de.Message, os.TempDir()) {
		tb.Errorf("message %q shows a path", de.Message)
	}
}

// TestADurableReaderServesOnlyWhatItsSyncCovers: with Durable, ReadLines
// looks how far the file reaches, has the server's Syncer make that much
// durable, and serves no further: a line appended meanwhile (its commit not
// waited for) is left for the next read. With nothing new to read it does
// not sync at all.
func TestADurableReaderServesOnlyWhatItsSyncCovers(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "tasks"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := dayFile(dir, "2026-07-26")
	if err := os.WriteFile(path, []byte(lineA1+lineB1), 0o644); err != nil {
		t.Fatal(err)
	}
	var syncs int
	r := eventlog.NewReader(dir).Durable(nil, func(context.Context) error {
		syncs++
		if syncs == 1 { // a line written while the first sync runs
			f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteString(lineA3)
			return err
		}
		return nil
	})
	all := func(string, string) bool { return true }

	got, next, err := r.ReadLines("2026-07-26", 0, 1<<20, all)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != lineA1+lineB1 || next != int64(len(lineA1+lineB1)) || syncs != 1 {
		t.Fatalf("first read = %q, next %d, %d syncs; want the two lines there before the sync, one sync", got, next, syncs)
	}
	got, next, err = r.ReadLines("2026-07-26", next, 1<<20, all)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != lineA3 || syncs != 2 {
		t.Fatalf("second read = %q, %d syncs; want the line written during the first sync, after a sync of its own", got, syncs)
	}
	if _, _, err := r.ReadLines("2026-07-26", next, 1<<20, all); err != nil || syncs != 2 {
		t.Fatalf("a read at the end = %v, %d syncs; want nothing and no sync", err, syncs)
	}

	failing := eventlog.NewReader(dir).Durable(nil, func(context.Context) error {
		return domain.E(domain.KindUnavailable, domain.CodeStorageUnavailable, "flush failed")
	})
	if got, _, err := failing.ReadLines("2026-07-26", 0, 1<<20, all); domain.KindOf(err) != domain.KindUnavailable || got != nil {
		t.Fatalf("a read whose sync fails = %q, %v; want no lines and the failure", got, err)
	}
}

// slowJournal holds each Append, the line already written to its day file,
// until the test lets it go, and says how many it has recorded.
type slowJournal struct {
	entered  chan struct{}
	release  chan struct{}
	recorded atomic.Int32
}

func (j *slowJournal) Append(string, int64, []byte) {
	j.entered <- struct{}{}
	<-j.release
	j.recorded.Add(1)
}

func (j *slowJournal) BeforeCommit(func() error) {}

// TestADurableReaderWaitsForTheLineToBeRecorded: a line is written to its
// day file before the journal records it. A durable read that sees the
// line must not sync before the record is in: a sync that finds no record
// waiting returns at once, and the line would be served with nothing to
// make it durable.
func TestADurableReaderWaitsForTheLineToBeRecorded(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir)
	j := &slowJournal{entered: make(chan struct{}), release: make(chan struct{})}
	l.UseJournal(j)
	ev := lifecycle(t)["posted"]
	appended := make(chan error, 1)
	go func() { appended <- l.Append(context.Background(), ev, false) }()
	<-j.entered // the line is in the file, its record not yet

	var recordedAtSync int32 = -1
	r := eventlog.NewReader(dir).Durable(l, func(context.Context) error {
		recordedAtSync = j.recorded.Load()
		return nil
	})
	read := make(chan error, 1)
	go func() {
		_, _, err := r.ReadLines(ev.At.UTC().Format(time.DateOnly), 0, 1<<20, func(string, string) bool { return true })
		read <- err
	}()
	select {
	case err := <-read: // served at once: it must have synced after the record
		close(j.release)
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(50 * time.Millisecond): // waiting, as it should
		close(j.release)
		if err := <-read; err != nil {
			t.Fatal(err)
		}
	}
	if err := <-appended; err != nil {
		t.Fatal(err)
	}
	if recordedAtSync != 1 {
		t.Errorf("the read synced with %d lines recorded, want the line it served (1)", recordedAtSync)
	}
}
