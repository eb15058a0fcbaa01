package wsapi

import "time"

// goroutines runs functions on goroutines it keeps for reuse. A worker
// socket starts one for every claim, every report and every task it holds,
// thousands a second under load, and a claim or a result runs deep (the
// store's write and its flush): on a fresh goroutine its stack grows from
// the runtime's smallest, copied at each doubling, which took about 5 % of
// the server's CPU (perf; BENCHMARKS.md's history). A goroutine kept here
// keeps the stack it grew.
type goroutines struct {
	// idle hands a function to a goroutine waiting for one; unbuffered, so
	// a send succeeds only when one is waiting.
	idle chan func()
	// linger is how long an idle goroutine waits for work before it ends,
	// so that a burst does not leave its goroutines behind for good.
	linger time.Duration
}

// idleLinger is goroutines.linger in the server.
const idleLinger = 10 * time.Second

func newGoroutines(linger time.Duration) *goroutines {
	return &goroutines{idle: make(chan func()), linger: linger}
}

// Go runs fn on an idle goroutine, or on a new one if none is idle. As with
// the go statement, the caller tracks when fn is done.
func (g *goroutines) Go(fn func()) {
	select {
	case g.idle <- fn:
	default:
		go g.loop(fn)
	}
}

func (g *goroutines) loop(fn func()) {
	t := time.NewTimer(g.linger)
	defer t.Stop()
	for {
		fn()
		fn = nil // let what it holds go while this goroutine waits
		t.Reset(g.linger)
		select {
		case fn = <-g.idle:
		case <-t.C:
			return
		}
	}
}
