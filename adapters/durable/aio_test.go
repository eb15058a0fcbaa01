package durable

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestAsyncFdatasyncCompletesThroughTheKernel: on Linux the journal's
// fdatasync goes through AIO (a context and an eventfd are made), each
// call reaps exactly its own completion (the eventfd is left at zero, so
// the next call cannot return early), and the data is in the file.
func TestAsyncFdatasyncCompletesThroughTheKernel(t *testing.T) {
	a := newAsyncSyncer()
	t.Cleanup(func() { _ = a.close() })
	if a.done == nil {
		t.Fatal("no AIO context: the journal's flushes would hold a processor")
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "j"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := range 50 {
		if _, err := f.WriteAt([]byte{byte(i)}, int64(i)); err != nil {
			t.Fatal(err)
		}
		if err := a.fdatasync(int(f.Fd())); err != nil {
			t.Fatalf("fdatasync %d: %v", i, err)
		}
		var n [8]byte
		if _, err := unix.Read(a.efd, n[:]); !errors.Is(err, unix.EAGAIN) {
			t.Fatalf("after fdatasync %d the eventfd still counts: %v %v", i, n, err)
		}
	}
	if b, err := os.ReadFile(f.Name()); err != nil || len(b) != 50 || b[49] != 49 {
		t.Fatalf("file holds %v, %v", b, err)
	}
}

// TestAsyncFdatasyncReportsWhatTheKernelRefuses: a descriptor that cannot
// be synced (a pipe) is refused at submission, and the plain fdatasync it
// falls back to gives the kernel's error. (An error in the completion
// itself, ev.res, needs a disc that fails: not made here.)
func TestAsyncFdatasyncReportsWhatTheKernelRefuses(t *testing.T) {
	a := newAsyncSyncer()
	t.Cleanup(func() { _ = a.close() })
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if err := a.fdatasync(int(w.Fd())); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("fdatasync of a pipe: %v, want EINVAL", err)
	}
	var closed asyncSyncer // closed, or never set up: plain fdatasync
	if err := closed.fdatasync(-1); !errors.Is(err, unix.EBADF) {
		t.Fatalf("fdatasync of fd -1: %v, want EBADF", err)
	}
}
