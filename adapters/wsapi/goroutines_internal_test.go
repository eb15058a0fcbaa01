package wsapi

import (
	"bytes"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// goid is the calling goroutine's number, from its stack's first line.
func goid() uint64 {
	buf := make([]byte, 64)
	n, _ := goroutineOf(buf[:runtime.Stack(buf, false)])
	return n
}

// goroutineOf is the number in a stack's header line ("goroutine 42
// [running]:"); ok is false for any other line.
func goroutineOf(line []byte) (n uint64, ok bool) {
	rest, ok := bytes.CutPrefix(line, []byte("goroutine "))
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(string(rest[:max(bytes.IndexByte(rest, ' '), 0)]), 10, 64)
	return n, err == nil
}

// Functions handed over one after another, each once the one before has
// ended, run on the goroutine the first one started: that is the point.
func TestGoroutinesReuseAnIdleOne(t *testing.T) {
	g := newGoroutines(time.Hour)
	ids := map[uint64]bool{}
	for range 20 {
		done := make(chan uint64)
		g.Go(func() { done <- goid() })
		ids[<-done] = true
		// Give the goroutine time to get back to waiting for work; should it
		// not make it, the next function starts one more, and the count
		// below allows for a few of those.
		time.Sleep(time.Millisecond)
	}
	if len(ids) > 5 {
		t.Errorf("20 functions in a row ran on %d goroutines, want 1 (a few at most)", len(ids))
	}
}

// Functions handed over while the others still run each get a goroutine:
// none waits for another to end.
func TestGoroutinesRunSideBySide(t *testing.T) {
	g := newGoroutines(time.Hour)
	const n = 50
	var started sync.WaitGroup
	started.Add(n)
	release := make(chan struct{})
	var ended sync.WaitGroup
	ended.Add(n)
	for range n {
		g.Go(func() {
			defer ended.Done()
			started.Done()
			<-release // each one waits until all of them run
		})
	}
	all := make(chan struct{})
	go func() { started.Wait(); close(all) }()
	select {
	case <-all:
	case <-time.After(10 * time.Second):
		// Release them, so that the test ends with its failure.
		close(release)
		t.Fatalf("%d functions handed over at once did not all run at once", n)
	}
	close(release)
	ended.Wait()
}

// An idle goroutine ends after its linger, so a burst leaves none behind.
func TestGoroutinesEndAfterTheirLinger(t *testing.T) {
	g := newGoroutines(5 * time.Millisecond)
	var ended sync.WaitGroup
	ids := make(chan uint64, 10)
	ended.Add(10)
	release := make(chan struct{})
	for range 10 {
		g.Go(func() {
			defer ended.Done()
			ids <- goid()
			<-release
		})
	}
	close(release)
	ended.Wait()
	close(ids)
	want := map[uint64]bool{}
	for id := range ids {
		want[id] = true
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := 0
		buf := make([]byte, 1<<20)
		stacks := buf[:runtime.Stack(buf, true)]
		for _, line := range bytes.Split(stacks, []byte("\n")) {
			if n, ok := goroutineOf(line); ok && want[n] {
				left++
			}
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the burst's 10 goroutines still exist 10 s after it ended (linger 5 ms)", left)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
