package eventlog_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestPruneKeepsTodayAndTheDaysBefore(t *testing.T) {
	days := []string{"2026-07-04", "2026-07-05", "2026-07-06", "2026-07-25", "2026-07-26", "2026-07-27"}
	// Not day files: left alone whatever their date looks like.
	junk := []string{"notes.txt", "2026-07-01.jsonl.tmp", "2026-7-01.jsonl", "2026-02-30.jsonl", "2026-07-01.JSONL"}
	tests := []struct {
		name string
		now  time.Time
		days int
		kept []string
	}{
		{
			name: "21 days from the first instant of the day",
			now:  time.Date(2026, 7, 26, 0, 0, 0, 0, time.UTC),
			days: 21,
			kept: []string{"2026-07-06", "2026-07-25", "2026-07-26", "2026-07-27"},
		},
		{
			name: "21 days from the last instant of the day",
			now:  time.Date(2026, 7, 26, 23, 59, 59, 999_999_999, time.UTC),
			days: 21,
			kept: []string{"2026-07-06", "2026-07-25", "2026-07-26", "2026-07-27"},
		},
		{
			name: "today is the UTC day, not the local one",
			now:  time.Date(2026, 7, 27, 5, 0, 0, 0, time.FixedZone("+14", 14*3600)),
			days: 21,
			kept: []string{"2026-07-06", "2026-07-25", "2026-07-26", "2026-07-27"},
		},
		{
			name: "one day keeps only today and later",
			now:  time.Date(2026, 7, 26, 12, 0, 0, 0, time.UTC),
			days: 1,
			kept: []string{"2026-07-26", "2026-07-27"},
		},
		{
			name: "22 days keeps one more",
			now:  time.Date(2026, 7, 26, 12, 0, 0, 0, time.UTC),
			days: 22,
			kept: []string{"2026-07-05", "2026-07-06", "2026-07-25", "2026-07-26", "2026-07-27"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := mustOpen(t, dir)
			for _, d := range days {
				mustWrite(t, dayFile(dir, d))
			}
			for _, j := range junk {
				mustWrite(t, filepath.Join(dir, "tasks", j))
			}
			if err := os.Mkdir(dayFile(dir, "2026-07-01"), 0o755); err != nil {
				t.Fatal(err)
			}

			if err := l.Prune(context.Background(), tc.now, tc.days); err != nil {
				t.Fatal(err)
			}

			var want []string
			for _, d := range tc.kept {
				want = append(want, d+".jsonl")
			}
			want = append(want, junk...)
			want = append(want, "2026-07-01.jsonl") // the folder
			slices.Sort(want)
			if diff := cmp.Diff(want, namesIn(t, filepath.Join(dir, "tasks"))); diff != "" {
				t.Errorf("files after prune (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPruneClosesAnOpenDayFile(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir)
	old := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	if err := l.Append(context.Background(), eventAt(t, "a000000000000001", old), false); err != nil {
		t.Fatal(err)
	}
	if err := l.Prune(context.Background(), old.AddDate(0, 0, 30), 21); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dayFile(dir, "2026-07-01")); !os.IsNotExist(err) {
		t.Fatalf("pruned day file still there: %v", err)
	}
	// A late line of that day goes to a new file, not to the unlinked one.
	if err := l.Append(context.Background(), eventAt(t, "a000000000000002", old), false); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a000000000000002"}, idsIn(t, dayFile(dir, "2026-07-01"))); diff != "" {
		t.Errorf("ids (-want +got):\n%s", diff)
	}
}

func TestPruneRefusesAnEmptyWindow(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir)
	mustWrite(t, dayFile(dir, day0))
	if err := l.Prune(context.Background(), t0, 0); err == nil {
		t.Fatal("Prune with 0 days succeeded")
	}
	if diff := cmp.Diff([]string{day0 + ".jsonl"}, namesIn(t, filepath.Join(dir, "tasks"))); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
}

func mustWrite(tb testing.TB, path string) {
	tb.Helper()
	if err := os.WriteFile(path, []byte("{}\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
}

func namesIn(tb testing.TB, dir string) []string {
	tb.Helper()
	entries, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		tb.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}
