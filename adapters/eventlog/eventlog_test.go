package eventlog_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/domain"
)

// eventAt returns the posted event of the lifecycle task, stamped at, with id
// so that lines can be told apart.
func eventAt(tb testing.TB, id string, at time.Time) domain.Event {
	tb.Helper()
	ev := lifecycle(tb)["posted"]
	ev.At = at
	ev.Task.ID = id
	return ev
}

// idsIn returns the "id" of each line of a day file, in file order.
func idsIn(tb testing.TB, path string) []string {
	tb.Helper()
	var ids []string
	for _, l := range readLines(tb, path) {
		var v struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			tb.Fatalf("line %q: %v", l, err)
		}
		ids = append(ids, v.ID)
	}
	return ids
}

func TestAppendRotatesAtUTCMidnight(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir)
	midnight := time.Date(2026, 7, 27, 0, 0, 0, 0, time.UTC)
	// Stragglers: transitions of a moment before midnight whose lines come
	// after the first line of the new day. Each goes to its own day's file.
	steps := []struct {
		id string
		at time.Time
	}{
		{"a000000000000001", midnight.Add(-time.Millisecond)},
		{"b000000000000001", midnight},
		{"a000000000000002", midnight.Add(-2 * time.Millisecond)},
		{"b000000000000002", midnight.Add(time.Millisecond)},
		{"a000000000000003", midnight.Add(-time.Nanosecond)},
		// Two days later, then a line of the day before yesterday, which no
		// longer has an open file.
		{"d000000000000001", midnight.Add(48 * time.Hour)},
		{"a000000000000004", midnight.Add(-time.Hour)},
		{"d000000000000002", midnight.Add(49 * time.Hour)},
	}
	for _, s := range steps {
		if err := l.Append(context.Background(), eventAt(t, s.id, s.at), false); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string][]string{
		"2026-07-26": {"a000000000000001", "a000000000000002", "a000000000000003", "a000000000000004"},
		"2026-07-27": {"b000000000000001", "b000000000000002"},
		"2026-07-29": {"d000000000000001", "d000000000000002"},
	}
	got := map[string][]string{}
	entries, err := os.ReadDir(dir + "/tasks")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		day := strings.TrimSuffix(e.Name(), ".jsonl")
		got[day] = idsIn(t, dayFile(dir, day))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ids by day file (-want +got):\n%s", diff)
	}
}

func TestConcurrentAppendsWriteWholeLines(t *testing.T) {
	const writers, each = 32, 200
	dir := t.TempDir()
	l := mustOpen(t, dir)
	// A big item makes each line several KiB, so interleaved writes would
	// show as broken lines.
	item := json.RawMessage(`{"pad":"` + strings.Repeat("x", 4000) + `"}`)

	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				ev := eventAt(t, fmt.Sprintf("%08x%08x", w, i), t0)
				ev.Task.Item = item
				if err := l.Append(context.Background(), ev, false); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	seen := map[string]bool{}
	for _, id := range idsIn(t, dayFile(dir, day0)) { // fails on a line that does not parse
		if seen[id] {
			t.Fatalf("id %s written twice", id)
		}
		seen[id] = true
	}
	if len(seen) != writers*each {
		t.Fatalf("%d lines, want %d", len(seen), writers*each)
	}
}

func TestAppendFailureIsLogUnavailable(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full to fill the disc with:", err)
	}
	dir := t.TempDir()
	l := mustOpen(t, dir)
	// Every write to /dev/full fails with ENOSPC, as on a full disc.
	if err := os.Symlink("/dev/full", dayFile(dir, day0)); err != nil {
		t.Fatal(err)
	}
	err := l.Append(context.Background(), eventAt(t, "9f2c1a0b7d4e6f83", t0), false)
	assertLogUnavailable(t, err)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("error %v does not wrap ENOSPC", err)
	}
}

func TestAppendAfterCloseFails(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir)
	if err := l.Append(context.Background(), eventAt(t, "9f2c1a0b7d4e6f83", t0), false); err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	assertLogUnavailable(t, l.Append(context.Background(), eventAt(t, "3a71bd0c5e2f9481", t0), false))
	if diff := cmp.Diff([]string{"9f2c1a0b7d4e6f83"}, idsIn(t, dayFile(dir, day0))); diff != "" {
		t.Errorf("ids (-want +got):\n%s", diff)
	}
}

func assertLogUnavailable(tb testing.TB, err error) {
	tb.Helper()
	var de *domain.Error
	if !errors.As(err, &de) {
		tb.Fatalf("error %v is not a *domain.Error", err)
	}
	if de.Kind != domain.KindUnavailable || de.Code != "log_unavailable" {
		tb.Errorf("error kind %v code %q, want unavailable log_unavailable", de.Kind, de.Code)
	}
}

// TestTornTailIsCut: a line a crash left half-written at the end of a day
// file is cut when the file is next opened, so the next line stays whole.
func TestTornTailIsCut(t *testing.T) {
	for _, c := range []struct{ name, before, want string }{
		{"after whole lines", `{"id":"a"}` + "\n" + `{"id":"b","ev`, `{"id":"a"}` + "\n"},
		{"the only line", `{"id":"b","ev`, ""},
		{"nothing torn", `{"id":"a"}` + "\n", `{"id":"a"}` + "\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			at := time.Date(2026, 7, 26, 9, 0, 0, 0, time.UTC)
			path := dayFile(dir, "2026-07-26")
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(c.before), 0o644); err != nil {
				t.Fatal(err)
			}
			l := mustOpen(t, dir)
			if err := l.Append(context.Background(), eventAt(t, "00000000000000c1", at), false); err != nil {
				t.Fatal(err)
			}
			data, _ := os.ReadFile(path)
			got, ok := strings.CutSuffix(string(data), "\n")
			line := got[strings.LastIndexByte(got, '\n')+1:]
			if !ok || !strings.HasPrefix(string(data), c.want) || !json.Valid([]byte(line)) || len(data) <= len(c.want) {
				t.Fatalf("day file after a torn tail:\n%s", data)
			}
			if string(data[:len(c.want)]) != c.want || !strings.Contains(line, "00000000000000c1") {
				t.Fatalf("day file = %q, want %q then the new line", data, c.want)
			}
		})
	}
}
