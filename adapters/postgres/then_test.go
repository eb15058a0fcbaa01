package postgres

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// Thens run one at a time in ticket order, whatever order their changes
// arrive in (a lost wake-up would hang here), and settle returns once a
// task's last Then has run.
func TestSequencerRunsThensInTicketOrder(t *testing.T) {
	var s sequencer
	s.init()
	const n = 200
	tickets := make([]uint64, n)
	for i := range n {
		tickets[i] = s.take(fmt.Sprintf("t%d", i%7))
	}
	var mu sync.Mutex
	var ran []uint64
	running := 0
	var wg sync.WaitGroup
	for _, i := range rand.Perm(n) {
		wg.Go(func() {
			_ = s.run(tickets[i], fmt.Sprintf("t%d", i%7), func() error {
				mu.Lock()
				running++
				if running > 1 {
					t.Errorf("ticket %d ran beside another Then", tickets[i])
				}
				ran = append(ran, tickets[i])
				mu.Unlock()
				runtime.Gosched() // room for another Then to start, were it let
				mu.Lock()
				running--
				mu.Unlock()
				return nil
			})
		})
	}
	settled := make(chan struct{})
	go func() {
		s.settle("t3")
		close(settled)
	}()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the Thens did not all run: a turn was never passed on")
	}
	select {
	case <-settled:
	case <-time.After(10 * time.Second):
		t.Fatal("settle did not return once the task's Thens had run")
	}
	if !slices.IsSorted(ran) || len(ran) != n {
		t.Errorf("Thens ran in the order %v, want the %d tickets in order", ran, n)
	}
	if len(s.inflight) != 0 {
		t.Errorf("left in flight: %v", s.inflight)
	}
}
