package bench

import (
	"math"
	"strings"
	"testing"
)

// TestMachineTimesReadsIdleAndIOWait reads the first line of /proc/stat:
// the idle share counts idle and iowait, out of user to steal, and the
// guest columns (already in user) are not counted twice.
func TestMachineTimesReadsIdleAndIOWait(t *testing.T) {
	stat := "cpu  100 5 40 800 50 2 3 0 70 0\ncpu0 50 2 20 400 25 1 2 0 35 0\nintr 1 2 3\n"
	m, err := parseMachineTimes([]byte(stat))
	if err != nil {
		t.Fatal(err)
	}
	if m.total != 1000 || m.idle != 850 {
		t.Fatalf("got total %d idle %d, want 1000 and 850", m.total, m.idle)
	}
	for _, bad := range []string{"", "intr 1 2\n", "cpu 1 2 x 4 5\n", "cpu 1 2\n"} {
		if _, err := parseMachineTimes([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	// On this machine: a share between 0 and 100 once time has passed.
	start, err := readMachineTimes()
	if err != nil {
		t.Skipf("no /proc/stat: %v", err)
	}
	start.total-- // as if a tick had passed, so the share is defined at once
	if pct := start.idleSince(); pct == nil || *pct < 0 || *pct > 100 {
		t.Fatalf("idle since a moment ago: %v", pct)
	}
}

// TestFlushesFromAScrape reads the flush metrics out of a scrape with
// other metrics around them (a histogram's buckets, a longer name with the
// same prefix), and takes the mean flush and callers between two scrapes.
func TestFlushesFromAScrape(t *testing.T) {
	scrape := func(count, seconds, callers string) []byte {
		return []byte(strings.Join([]string{
			"# HELP taskhoster_flush_duration_seconds How long each group commit of the journal took.",
			`taskhoster_flush_duration_seconds_bucket{le="0.001"} 3`,
			"taskhoster_flush_duration_seconds_sum " + seconds,
			"taskhoster_flush_duration_seconds_count " + count,
			"taskhoster_flush_callers_sum_other 999",
			"taskhoster_flush_callers_sum " + callers,
			"taskhoster_flush_callers_count " + count,
		}, "\n"))
	}
	read := func(data []byte) flushes {
		f, err := parseFlushes(data)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	before, after := read(scrape("10", "0.01", "40")), read(scrape("110", "0.31", "2440"))
	ms, callers := before.since(after)
	if math.Abs(ms-3) > 1e-9 || math.Abs(callers-24) > 1e-9 {
		t.Fatalf("mean flush %v ms, %v callers; want 3 ms and 24", ms, callers)
	}
	if ms, callers := after.since(after); ms != 0 || callers != 0 {
		t.Fatalf("no flush between two scrapes gave %v ms, %v callers", ms, callers)
	}
	if _, err := parseMetrics([]byte("taskhoster_flush_callers_sum_other 1\n"), []string{"taskhoster_flush_callers_sum"}); err == nil {
		t.Fatal("a metric found by a longer name's prefix")
	}
	if _, err := parseMetrics([]byte("taskhoster_flush_callers_sum NaNx\n"), []string{"taskhoster_flush_callers_sum"}); err == nil {
		t.Fatal("an unreadable value gave no error")
	}
}
