package bench

import (
	"math"
	"strings"
	"testing"
)

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
