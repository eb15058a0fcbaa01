package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	rtrace "runtime/trace"
	"syscall"
	"testing"
)

// TestReadCountsTheBlockingFlushes traces five blocking fdatasyncs of a
// file with data to write and reads the trace back: each is counted with
// its duration, and the time they were in flight is part of the trace.
func TestReadCountsTheBlockingFlushes(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "data"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var buf bytes.Buffer
	if err := rtrace.Start(&buf); err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	for range 5 {
		if _, err := f.Write(chunk); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			t.Fatal(err)
		}
	}
	rtrace.Stop()

	s, err := read(&buf, runtime.GOMAXPROCS(0))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.syncs) != 5 {
		t.Fatalf("%d blocking fdatasyncs counted, want 5", len(s.syncs))
	}
	var sum int64
	for _, d := range s.syncs {
		sum += int64(d)
	}
	if s.inSync <= 0 || int64(s.inSync) > sum || s.total < s.inSync || s.starvedInSync > s.starved {
		t.Fatalf("in flight %v of %v (sum of the calls %v), starved %v of it %v",
			s.inSync, s.total, sum, s.starvedInSync, s.starved)
	}
}
