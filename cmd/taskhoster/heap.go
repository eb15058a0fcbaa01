package main

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
)

// heapHeadroom is the least room serve's heap may grow by between two
// collections. Go's default (GOGC=100) is the live heap's own size, and a
// busy server's live heap is small (about 8 MB at thousands of tasks a
// second) while it allocates tens of kilobytes per task, so it collected
// every few tens of milliseconds, a sixth of its CPU. With this room a
// collection comes about a third as often. Once the live heap is larger
// than the room (a queue of some tens of thousands of tasks in the file
// store's index) Go's own room is the larger and nothing changes, so the
// memory a large queue takes stays what it was; a room of 64 MB took a
// third more per task at 100 000.
const heapHeadroom = 32 << 20

// keepHeapHeadroom has the collector leave at least headroom bytes of
// growth after each collection, re-reading the live heap after every one
// of them. It does nothing when GOGC is set: whoever set it chose.
func keepHeapHeadroom(headroom uint64) {
	if _, set := os.LookupEnv("GOGC"); set {
		return
	}
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	last := 100
	var adjust func()
	adjust = func() {
		metrics.Read(sample)
		if pct := headroomPercent(sample[0].Value.Uint64(), headroom); pct != last {
			debug.SetGCPercent(pct)
			last = pct
		}
		rearm(adjust)
	}
	adjust()
}

// headroomPercent is the GOGC that gives a live heap of live bytes at least
// headroom bytes to grow by: 100 or more, in steps of 10 so that small
// changes of the live heap do not each reset it.
func headroomPercent(live, headroom uint64) int {
	if live == 0 {
		live = 1 << 20
	}
	pct := int(headroom * 100 / live)
	pct = (pct + 9) / 10 * 10
	return max(pct, 100)
}

// rearm runs f once after the next collection: from the finalizer of an
// object that only that collection frees (one with a pointer, so that it
// is never packed with others by the allocator for tiny objects).
func rearm(f func()) {
	runtime.SetFinalizer(&gcSentinel{}, func(*gcSentinel) { f() })
}

type gcSentinel struct{ _ *byte }
