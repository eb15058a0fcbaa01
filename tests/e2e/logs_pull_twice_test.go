package e2e

import (
	"regexp"
	"strconv"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestTwoLogsPullsAtOnceStoreEachLineOnce is a user starting a second
// `logs pull` into the same store by mistake while the first runs, and
// reading the store meanwhile (SPEC §9): both pulls end well, each line is
// stored once and counted as new by exactly one of them, and every read
// in between succeeds.
func TestTwoLogsPullsAtOnceStoreEachLineOnce(t *testing.T) {
	d := newDirs(t)
	logsQueues(t, d)
	s := start(t, d, "--sync", "none")
	for i := range 20 {
		s.finishTask("archived", i)
	}
	want := s.readableLines()

	store := t.TempDir()
	if n := s.mustPull(store, "--limit", "1"); n != 1 {
		t.Fatalf("first pull reported %d new lines, want 1", n) // the store exists for the reader
	}
	runs := make([]logsRun, 2)
	var wg sync.WaitGroup
	for i := range runs {
		wg.Add(1)
		go func() { defer wg.Done(); runs[i] = s.logsPull(store, "--batch", "1") }()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	reads := 0
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		default:
		}
		if storedLines(store) < 0 {
			t.Errorf("a read of the store failed while two pulls wrote it")
			break
		}
		reads++
	}
	<-done
	t.Logf("%d reads while the pulls ran", reads)
	added := 1
	for i, r := range runs {
		if r.code != 0 {
			t.Fatalf("pull %d exited %d\nstdout: %s\nstderr: %s", i, r.code, r.stdout, r.stderr)
		}
		m := regexp.MustCompile(`(\d+) new lines?`).FindStringSubmatch(r.stdout)
		if m == nil {
			t.Fatalf("pull %d printed no summary: %q", i, r.stdout)
		}
		n, _ := strconv.Atoi(m[1])
		added += n
	}
	if added != len(want) {
		t.Errorf("the pulls reported %d new lines in all, want %d", added, len(want))
	}
	if diff := cmp.Diff(want, mirrored(t, store)); diff != "" {
		t.Errorf("mirror after two pulls at once (-want +got):\n%s", diff)
	}
	if n := s.mustPull(store); n != 0 {
		t.Errorf("a pull after both reported %d new lines, want 0", n)
	}
}
