package eventlog_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/adapters/eventlog"
)

// backwards collects every line Backwards gives, copied.
func backwards(t *testing.T, r *eventlog.Reader) []string {
	t.Helper()
	var got []string
	if err := r.Backwards(context.Background(), func(line []byte) bool {
		got = append(got, string(line))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestBackwardsGivesEveryLineNewestFirst: lines of random lengths, many
// crossing the 64 KiB blocks the file is read in, over three day files,
// come back exactly, newest day first and newest line first; the last
// line of a day still being written is not a line yet.
func TestBackwardsGivesEveryLineNewestFirst(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "tasks"), 0o755); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var want []string
	for _, day := range []string{"2026-07-24", "2026-07-25", "2026-07-26"} {
		var lines []string
		for i := range 2000 {
			n := rng.IntN(400)
			if i%97 == 0 {
				n = 70 << 10 // longer than a block
			}
			if i%211 == 0 {
				n = 0 // an empty line is still a line
			}
			lines = append(lines, fmt.Sprintf("%s-%d-", day, i)+strings.Repeat("x", n))
		}
		content := strings.Join(lines, "\n") + "\n" + `{"t":9,"unfinished`
		if err := os.WriteFile(dayFile(dir, day), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		slices.Reverse(lines)
		want = append(lines, want...)
	}
	got := backwards(t, eventlog.NewReader(dir))
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("line %d: got %.40q (%d bytes), want %.40q (%d bytes)", i, got[i], len(got[i]), want[i], len(want[i]))
		}
	}
}

// TestBackwardsEdges: an empty log, empty and unfinished-only day files, a
// line too long to be one of ours (skipped, the lines around it kept), and
// a day file without a final newline at its start.
func TestBackwardsEdges(t *testing.T) {
	dir := t.TempDir()
	r := eventlog.NewReader(dir)
	if got := backwards(t, r); len(got) != 0 {
		t.Errorf("no tasks folder: got %q", got)
	}
	if err := os.MkdirAll(filepath.Join(dir, "tasks"), 0o755); err != nil {
		t.Fatal(err)
	}
	huge := strings.Repeat("h", 3<<20)
	files := map[string]string{
		"2026-07-20": "",
		"2026-07-21": "no newline at all",
		"2026-07-22": "first\n" + huge + "\nlast\n",
		"2026-07-23": huge + "\nafter a huge first line\n",
		"2026-07-24": "\n\nonly\n",
	}
	for day, content := range files {
		if err := os.WriteFile(dayFile(dir, day), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"only", "", "", "after a huge first line", "last", "first"}
	if diff := cmp.Diff(want, backwards(t, r)); diff != "" {
		t.Errorf("lines (-want +got):\n%s", diff)
	}
}

// TestBackwardsStops: fn's false ends the walk at once, in the middle of a
// day; a cancelled context ends it with the context's error.
func TestBackwardsStops(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "tasks"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, day := range []string{"2026-07-25", "2026-07-26"} {
		if err := os.WriteFile(dayFile(dir, day), []byte(day+"-a\n"+day+"-b\n"+day+"-c\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := eventlog.NewReader(dir)
	var got []string
	err := r.Backwards(context.Background(), func(line []byte) bool {
		got = append(got, string(line))
		return len(got) < 4
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"2026-07-26-c", "2026-07-26-b", "2026-07-26-a", "2026-07-25-c"}, got); diff != "" {
		t.Errorf("lines (-want +got):\n%s", diff)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = r.Backwards(ctx, func([]byte) bool { t.Error("a line after the context ended"); return true })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: err = %v, want context.Canceled", err)
	}
}
