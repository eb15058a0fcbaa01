package durable

// This file is the journal's fdatasync without a blocked processor: the
// call is handed to the kernel as Linux AIO (IOCB_CMD_FDSYNC, run by a
// kernel worker) and the flushing goroutine parks on an eventfd in the Go
// netpoller until it completes.
//
// Why: a goroutine in a blocking system call keeps its P (one of
// GOMAXPROCS) until the runtime's sysmon takes it back, and sysmon, asleep
// for up to 10 ms on a busy server, seldom does so within a flush of half
// a millisecond. Every flush then left one of the server's processors
// unused while goroutines waited to run: on 2 CPUs under --sync always,
// 39 % of the time (execution trace, BENCHMARKS.md "Issue 17").

import (
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	iocbCmdFdsync = 3 // IOCB_CMD_FDSYNC
	iocbFlagResfd = 1 // IOCB_FLAG_RESFD: signal the eventfd on completion
)

// iocb is struct iocb of linux/aio_abi.h (little-endian layout). An fdsync
// sets only the named fields; the blank ones keep the kernel's layout.
type iocb struct {
	_      uint64 // aio_data
	_      uint32 // aio_key
	_      uint32 // aio_rw_flags
	opcode uint16
	_      int16 // aio_reqprio
	fildes uint32
	_      uint64 // aio_buf
	_      uint64 // aio_nbytes
	_      int64  // aio_offset
	_      uint64 // aio_reserved2
	flags  uint32
	resfd  uint32
}

// The kernel reads 64 bytes per iocb and writes 32 per io_event: these fail
// to compile if a field is lost or mistyped.
var (
	_ [64 - unsafe.Sizeof(iocb{})]byte
	_ [unsafe.Sizeof(iocb{}) - 64]byte
	_ [32 - unsafe.Sizeof(ioEvent{})]byte
	_ [unsafe.Sizeof(ioEvent{}) - 32]byte
)

// ioEvent is struct io_event.
type ioEvent struct {
	data, obj uint64
	res, res2 int64
}

// asyncSyncer fdatasyncs through AIO, one call at a time (the journal's
// writes take turns under the Syncer's commitMu). Its zero value, or a
// failed setup, falls back to a plain fdatasync.
type asyncSyncer struct {
	ctx  uintptr
	done *os.File // the eventfd, read through the netpoller; nil: no AIO
	efd  int      // its descriptor (done.Fd would make it blocking)
}

// newAsyncSyncer sets up an AIO context and its eventfd; on any failure
// (a kernel without AIO, aio-max-nr reached) it returns one that uses
// plain fdatasync.
func newAsyncSyncer() *asyncSyncer {
	a := &asyncSyncer{}
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return a
	}
	var ctx uintptr
	if _, _, e := unix.Syscall(unix.SYS_IO_SETUP, 1, uintptr(unsafe.Pointer(&ctx)), 0); e != 0 {
		_ = unix.Close(efd)
		return a
	}
	a.ctx, a.efd, a.done = ctx, efd, os.NewFile(uintptr(efd), "journal-aio")
	return a
}

// fdatasync makes fd's data durable, as fdatasync(2).
func (a *asyncSyncer) fdatasync(fd int) error {
	if a.done == nil {
		return unix.Fdatasync(fd)
	}
	cb := &iocb{opcode: iocbCmdFdsync, fildes: uint32(fd), flags: iocbFlagResfd, resfd: uint32(a.efd)}
	cbs := [1]*iocb{cb}
	_, _, e := unix.Syscall(unix.SYS_IO_SUBMIT, a.ctx, 1, uintptr(unsafe.Pointer(&cbs[0])))
	runtime.KeepAlive(cb)
	if e != 0 {
		return unix.Fdatasync(fd) // EINVAL: this filesystem has no AIO fsync
	}
	var n [8]byte
	if _, err := a.done.Read(n[:]); err != nil {
		return fmt.Errorf("wait for fdatasync: %w", err)
	}
	var ev ioEvent
	for {
		got, _, e := unix.Syscall6(unix.SYS_IO_GETEVENTS, a.ctx, 1, 1, uintptr(unsafe.Pointer(&ev)), 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return fmt.Errorf("reap fdatasync: %w", e)
		}
		if got != 1 {
			return fmt.Errorf("reap fdatasync: %d events, want 1", got)
		}
		break
	}
	if ev.res < 0 {
		return unix.Errno(-ev.res)
	}
	return nil
}

// close releases the context and the eventfd; closing twice is harmless.
func (a *asyncSyncer) close() error {
	if a.done == nil {
		return nil
	}
	unix.Syscall(unix.SYS_IO_DESTROY, a.ctx, 0, 0)
	done := a.done
	a.done = nil
	return done.Close()
}
