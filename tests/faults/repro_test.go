package faults

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// stampedBackwards lists, for each task, the lines stamped earlier than
// the task's line before them: a change can only come after the last one.
func stampedBackwards(events []event) []string {
	last := map[string]event{}
	var out []string
	for _, ev := range events {
		if prev, ok := last[ev.ID]; ok && ev.At < prev.At {
			out = append(out, fmt.Sprintf("task %s: %s at %d after %s at %d (%d ms earlier)",
				ev.ID, ev.Event, ev.At, prev.Event, prev.At, prev.At-ev.At))
		}
		last[ev.ID] = ev
	}
	return out
}

// TestClaimsAreStampedAfterTheirTasksLastChange pins a bug the fault
// harness found: a claim read the clock before it took the store's lock, so
// a claim that waited for the lock while a post or a re-queue made a task
// pending could take that task with a time before it became pending. The
// start-up repair relies on a task's stamps rising ("a newer line says the
// log is not behind the store"), so a crash that cut such a claim's line
// left it cut for good (seed 1796165956239115744). Posters and claimers
// race here, and no line of a task may be stamped before the one it
// follows.
func TestClaimsAreStampedAfterTheirTasksLastChange(t *testing.T) {
	f := newFolders(t)
	port := freePort(t)
	p, err := start(f, port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.stop(time.Minute) })
	a := newAPI(port)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for n := 0; !closed(stop); n++ {
				a.do("POST", "/"+queue, map[string]any{"tag": fmt.Sprintf("repro-%d-%d", i, n)})
			}
		})
		wg.Go(func() {
			for !closed(stop) {
				a.do("POST", "/"+queue+"/claim", map[string]any{"worker": "repro", "wait": 0})
			}
		})
	}
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()
	if err := p.stop(time.Minute); err != nil {
		t.Fatal(err)
	}
	events, _, err := readLog(f.logs)
	if err != nil {
		t.Fatal(err)
	}
	if bad := stampedBackwards(events); len(bad) > 0 {
		t.Errorf("%d of %d lines are stamped before their task's line before them, e.g. %s", len(bad), len(events), bad[0])
	}
}
