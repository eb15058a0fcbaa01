// Command schedtrace reads an execution trace of the server (the admin
// listener's /debug/pprof/trace) and says how much of it the server's Go
// code could not use its processors: the time during which fewer than
// GOMAXPROCS goroutines ran (in Go code or in a system call that is not a
// flush) while others were ready to run, and how much of that fell while a
// journal fdatasync was in flight. It also reports the fdatasyncs' own
// durations. BENCHMARKS.md ("Issue 17") has the figures and the commands.
//
// It is a module of its own, as bench/river is, so that the server's module
// does not require golang.org/x/exp.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

func main() {
	procs := flag.Int("procs", 2, "the server's GOMAXPROCS")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: schedtrace [-procs N] TRACE")
		os.Exit(2)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fail(err)
	}
	defer f.Close()
	s, err := read(f, *procs)
	if err != nil {
		fail(err)
	}
	pc := func(d time.Duration) float64 { return 100 * float64(d) / float64(s.total) }
	fmt.Printf("trace: %v\n", s.total.Round(time.Millisecond))
	fmt.Printf("fewer than %d goroutines working while others were ready: %.1f %%\n", *procs, pc(s.starved))
	fmt.Printf("  of it with a blocking fdatasync in flight:          %.1f %%\n", pc(s.starvedInSync))
	fmt.Printf("a blocking fdatasync in flight:                       %.1f %%\n", pc(s.inSync))
	if n := len(s.syncs); n > 0 {
		slices.Sort(s.syncs)
		var sum time.Duration
		for _, d := range s.syncs {
			sum += d
		}
		fmt.Printf("blocking fdatasyncs: %d, mean %v, p50 %v, p90 %v, p99 %v\n", n,
			(sum / time.Duration(n)).Round(time.Microsecond), s.syncs[n/2].Round(time.Microsecond),
			s.syncs[n*9/10].Round(time.Microsecond), s.syncs[n*99/100].Round(time.Microsecond))
	} else {
		fmt.Println("blocking fdatasyncs: none (flushes are asynchronous, or --sync none)")
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "schedtrace:", err)
	os.Exit(1)
}

type summary struct {
	total, starved, starvedInSync, inSync time.Duration
	syncs                                 []time.Duration // each blocking fdatasync
}

// read walks the trace's goroutine transitions. A goroutine counts as
// working while it runs Go code or sits in a system call, except an
// fdatasync (a processor held by one is the waste this measures) and the
// runtime's own parked calls (signals, the netpoller).
func read(r io.Reader, procs int) (summary, error) {
	tr, err := trace.NewReader(r)
	if err != nil {
		return summary{}, err
	}
	var s summary
	var first, last trace.Time
	working, ready, syncing := 0, 0, 0
	inSync := map[trace.GoID]trace.Time{}
	idleCall := map[trace.GoID]bool{}
	for {
		ev, err := tr.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			return summary{}, err
		}
		if first == 0 {
			first = ev.Time()
		}
		if last != 0 {
			d := time.Duration(ev.Time() - last)
			if working < procs && ready > 0 {
				s.starved += d
				if syncing > 0 {
					s.starvedInSync += d
				}
			}
			if syncing > 0 {
				s.inSync += d
			}
		}
		last = ev.Time()
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		if st.Resource.Kind != trace.ResourceGoroutine {
			continue
		}
		g := st.Resource.Goroutine()
		from, to := st.Goroutine()
		switch from {
		case trace.GoRunning:
			working--
		case trace.GoRunnable:
			ready--
		case trace.GoSyscall:
			if at, ok := inSync[g]; ok {
				syncing--
				s.syncs = append(s.syncs, time.Duration(ev.Time()-at))
				delete(inSync, g)
			} else if idleCall[g] {
				delete(idleCall, g)
			} else {
				working--
			}
		}
		switch to {
		case trace.GoRunning:
			working++
		case trace.GoRunnable:
			ready++
		case trace.GoSyscall:
			switch call := callOf(ev); {
			case strings.Contains(call, "Fdatasync"):
				inSync[g] = ev.Time()
				syncing++
			case strings.Contains(call, "signal_recv"), strings.Contains(call, "netpoll"):
				idleCall[g] = true
			default:
				working++
			}
		}
		// A trace begins with goroutines already in some state; counts
		// of the ones seen only leaving it may dip below zero.
		working, ready = max(working, 0), max(ready, 0)
	}
	s.total = time.Duration(last - first)
	return s, nil
}

// callOf names the functions on the stack of a system call.
func callOf(ev trace.Event) string {
	var b strings.Builder
	for fr := range ev.Stack().Frames() {
		b.WriteString(fr.Func)
		b.WriteByte(' ')
	}
	return b.String()
}
