package main

import (
	"os"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestHeadroomPercent(t *testing.T) {
	const mb = 1 << 20
	for _, tc := range []struct {
		live uint64
		want int
	}{
		{0, 6400},       // nothing marked yet: taken as 1 MB
		{8 * mb, 800},   // a busy server's small heap: 64 MB of room
		{30 * mb, 220},  // 213, rounded up to a step of 10
		{64 * mb, 100},  // Go's own room is as large
		{500 * mb, 100}, // and larger: never below Go's default
	} {
		if got := headroomPercent(tc.live, 64*mb); got != tc.want {
			t.Errorf("live %d MB: GOGC %d, want %d", tc.live/mb, got, tc.want)
		}
	}
}

// gcPercent is the collector's current GOGC.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// With GOGC set, the headroom leaves the collector alone; without it, the
// collector's GOGC follows the live heap after each collection.
func TestKeepHeapHeadroom(t *testing.T) {
	defer debug.SetGCPercent(gcPercent())

	t.Setenv("GOGC", "100")
	debug.SetGCPercent(100)
	keepHeapHeadroom(64 << 20)
	runtime.GC()
	if p := gcPercent(); p != 100 {
		t.Fatalf("with GOGC set: GOGC is %d, want 100", p)
	}

	// Unset for the rest (t.Setenv restores it after the test).
	t.Setenv("GOGC", "")
	os.Unsetenv("GOGC")
	runtime.GC()
	keepHeapHeadroom(64 << 20)
	small := gcPercent()
	if small < 400 {
		t.Fatalf("a small live heap: GOGC %d, want the room of 64 MB (several hundred)", small)
	}
	// A live heap of 48 MB more: after the next collections GOGC comes down.
	ballast := make([][]byte, 48)
	for i := range ballast {
		ballast[i] = make([]byte, 1<<20)
		ballast[i][0] = 1
	}
	deadline := time.Now().Add(10 * time.Second)
	for gcPercent() >= small && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond) // the finalizer runs on its own goroutine
	}
	if p := gcPercent(); p >= small || p < 100 {
		t.Errorf("with 48 MB more live: GOGC %d, want below %d and at least 100", p, small)
	}
	runtime.KeepAlive(ballast)
}
