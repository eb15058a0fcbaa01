package eventlog

import (
	"context"
	"testing"
	"time"

	"github.com/taskhoster/taskhoster/domain"
)

// A day file stays open only while it is one of the two newest days, so a
// long-running server holds two descriptors, not one per day of uptime.
func TestAtMostTwoDayFilesStayOpen(t *testing.T) {
	l, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	start := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	post := func(at time.Time) {
		t.Helper()
		ev := domain.Event{Kind: domain.EventPosted, At: at, Task: domain.Task{ID: "9f2c1a0b7d4e6f83", Status: domain.Pending}}
		if err := l.Append(context.Background(), ev, false); err != nil {
			t.Fatal(err)
		}
	}
	for d := range 5 {
		post(start.AddDate(0, 0, d))
	}
	post(start) // a straggler four days late: opened and retired at once
	got := dayKeys(l.files)
	if len(got) != 2 || l.files["2026-07-05"] == nil || l.files["2026-07-04"] == nil {
		t.Errorf("open day files %v, want 2026-07-04 and 2026-07-05", got)
	}
}
