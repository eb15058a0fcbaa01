package durable

// This file is the journal's format and its laps: records written at the
// end of the current file and fdatasynced (commit), laps handed over behind
// checkpoints, and the reset that forgets them. replay.go reads them back.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// op is what a record does to its path. The values are on disc.
type op byte

const (
	opLap    op = 0 // the first record of a lap; its data names the boot and the roots
	opPut    op = 1 // the file at Path holds Data
	opRemove op = 2 // there is no file at Path
	opAppend op = 3 // the file at Path holds Data from byte Off
)

// record is one write. Path is relative to the root whose place in
// rootNames Root is (the root's byte on disc).
type record struct {
	Op   op
	Root int
	Path string
	Off  int64
	Data []byte
}

// The record format: a fixed header, then the payload (op, root, offset,
// path length, path, data). The checksum covers the lap number and the payload, so that
// a record from an older lap, or one cut short by the crash, ends the lap.
const (
	magic      = "THJ1"
	headerSize = 4 + 8 + 4 + 4 // magic, lap, payload size, crc32c
	fixedSize  = 1 + 1 + 8 + 2 // op, root, offset, path length
	maxPath    = 1<<16 - 1
	maxLapData = 1 << 20 // a lap record's data: a boot id and two folders

	// A journal file grows by zeroed blocks ahead of its records, so that a
	// commit only overwrites blocks and its fdatasync has no metadata to
	// flush. It grows by its own size, from minGrow up to maxGrow at a time:
	// a small disc is not filled by a journal that a few tasks need.
	minGrow = 64 << 10
	maxGrow = 1 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var fileNames = [2]string{"journal-a", "journal-b"}

// zeros is what a journal file grows by, shared by every write.
var zeros = make([]byte, maxGrow)

// journal records writes and makes them durable (commit). add may be
// called from any goroutine; commit, reset, settle and close from one at a
// time (Syncer.commitMu).
type journal struct {
	dir     string
	roots   []string // the folders, absolute
	given   []string // the folders as configured (laps of old versions name them so)
	lapData []byte   // what each lap record holds: the boot id, then the roots
	boot    string   // the kernel's boot id (see bootID)
	limit   int64
	// checkpoint makes every file written so far durable (syncfs of the
	// filesystems the journal covers).
	checkpoint func() error

	mu      sync.Mutex
	pending []byte   // records not yet written
	after   []func() // to run once a commit holds the records added before them
	spare   []byte   // the buffer the last commit wrote, reused
	// holds are the records of writes not yet done on disc (Root.Hold), by
	// the order they were added in; taken is the last of them a commit has
	// taken (with pending), so a lap says again only those already written.
	holds   map[uint64]record
	lastSeq uint64
	taken   uint64

	files [2]*os.File
	aio   *asyncSyncer // their fdatasync
	sizes [2]int64     // their sizes: zeros beyond what was written
	cur   int          // the file being written
	lap   uint64       // its lap
	off   int64        // where its next record goes
	// ckpt delivers the result of the checkpoint that began when cur was
	// started; the other file may be reused only after it succeeded.
	ckpt chan error
	// failed is the first failure of a commit, a lap change or a
	// checkpoint. It stays: after a failed writeback the kernel reports the
	// error once and may drop the data, so a flush tried again can succeed
	// with the data lost; and the stores have already done the writes a
	// failed commit's records describe, some of them answered as failed,
	// which no later commit may make durable. Every later commit and settle
	// fails with it, and a restart is needed (fail-stop, as PostgreSQL does
	// after a failed fsync). Set under commitMu (stop); read also outside
	// it (Syncer.Err), hence atomic. Nil while the journal works.
	failed atomic.Pointer[error]

	// failWrite, when set (by tests), fails every write, as a full disc
	// would.
	failWrite error

	// halfReset, when set (by tests), runs between reset's two writes; an
	// error stops reset there, as a power loss would.
	halfReset func() error
}

// openJournal opens (creating if needed) the journal in dir, for writes in
// the folders given (a record's Root indexes them, in rootNames' order).
// checkpoint must make every file written before the call durable. It does
// not replay: call replay, then reset, before the first record.
//
// A lap names the folders by their absolute paths: a relative one names
// another folder from another working directory, and a replay there would
// write the records into it.
func openJournal(dir string, limit int64, checkpoint func() error, given []string) (*journal, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("open journal: %w", err)
	}
	roots := make([]string, len(given))
	for i, g := range given {
		abs, err := filepath.Abs(g)
		if err != nil {
			return nil, fmt.Errorf("open journal: %w", err)
		}
		roots[i] = abs
	}
	j := &journal{dir: dir, roots: roots, given: given, boot: bootID(), limit: limit, checkpoint: checkpoint, aio: newAsyncSyncer()}
	// NUL cannot be in a path.
	j.lapData = []byte(strings.Join(append([]string{j.boot}, roots...), "\x00"))
	for i, name := range fileNames {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			_ = j.close()
			return nil, fmt.Errorf("open journal: %w", err)
		}
		j.files[i] = f
		fi, err := f.Stat()
		if err != nil {
			_ = j.close()
			return nil, fmt.Errorf("open journal: %w", err)
		}
		j.sizes[i] = fi.Size()
	}
	return j, nil
}

// stop makes err, what failed, the journal's last: every later commit and
// settle fails with it (failed). A later stop keeps the first failure.
func (j *journal) stop(what string, err error) error {
	if failed := j.err(); failed != nil {
		return failed // the first failure is the one to tell
	}
	failed := fmt.Errorf("%s failed; restart the server: %w", what, err)
	j.failed.Store(&failed)
	j.markStopped(failed)
	return failed
}

// err is the failure that stopped the journal, or nil (failed).
func (j *journal) err() error {
	if failed := j.failed.Load(); failed != nil {
		return *failed
	}
	return nil
}

// stoppedName marks, in the journal's folder, a journal that stopped after
// a failure (journal.failed): the next start-up replays it even in the
// same boot. A failed writeback may have dropped pages the records
// describe, which the page cache then no longer holds once they are
// evicted, so that boot's files cannot be trusted to agree with the
// records as a plain crash's can (replay). Start-up removes it once the
// replay is settled (reset).
const stoppedName = "stopped"

// markStopped leaves the mark, as far as the failing disc allows: if it
// cannot be written either, the start-up trusts the page cache, as before
// a failure.
func (j *journal) markStopped(failed error) {
	mark := filepath.Join(j.dir, stoppedName)
	if err := os.WriteFile(mark, []byte(failed.Error()+"\n"), 0o644); err == nil {
		_ = syncDir(j.dir)
	}
}

// wasStopped reports whether a run left the mark of a stopped journal.
func (j *journal) wasStopped() bool {
	_, err := os.Stat(filepath.Join(j.dir, stoppedName))
	return err == nil
}

// afterCommit has fn run once a commit holds every record added before it
// (Root.AfterCommit).
func (j *journal) afterCommit(fn func()) {
	j.mu.Lock()
	j.after = append(j.after, fn)
	j.mu.Unlock()
}

// idle says whether a commit now would have nothing to do: no record
// waits for one, and nothing is to run after one (a Sync that finds the
// journal idle must not leave a move's retire, AfterCommit, to a commit
// that may be long in coming). A commit under way may still be writing
// the records it took: the Syncer knows (running).
func (j *journal) idle() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.pending) == 0 && len(j.after) == 0
}

// add records a write (Root's Put, Remove and Append), to be made durable
// by the next commit.
func (j *journal) add(o op, root int, path string, off int64, data []byte) {
	j.mu.Lock()
	j.pending = appendRecord(j.pending, record{Op: o, Root: root, Path: path, Off: off, Data: data})
	j.mu.Unlock()
}

// appendRecord encodes r onto b, with lap and checksum left for stamp.
func appendRecord(b []byte, r record) []byte {
	if len(r.Path) > maxPath || r.Root < 0 || r.Root > 255 {
		panic("durable: bad journal record") // a caller bug: task paths are short
	}
	size := fixedSize + len(r.Path) + len(r.Data)
	b = append(b, magic...)
	b = binary.LittleEndian.AppendUint64(b, 0) // the lap, when written
	b = binary.LittleEndian.AppendUint32(b, uint32(size))
	b = binary.LittleEndian.AppendUint32(b, 0) // the checksum, when written
	b = append(b, byte(r.Op), byte(r.Root))
	b = binary.LittleEndian.AppendUint64(b, uint64(r.Off))
	b = binary.LittleEndian.AppendUint16(b, uint16(len(r.Path)))
	b = append(b, r.Path...)
	return append(b, r.Data...)
}

// stamp sets the lap of every record in b and computes their checksums.
func stamp(b []byte, lap uint64) {
	for len(b) > 0 {
		size := int(binary.LittleEndian.Uint32(b[12:16]))
		binary.LittleEndian.PutUint64(b[4:12], lap)
		binary.LittleEndian.PutUint32(b[16:20], checksum(b[4:12], b[headerSize:headerSize+size]))
		b = b[headerSize+size:]
	}
}

func checksum(lap, payload []byte) uint32 {
	return crc32.Update(crc32.Checksum(lap, castagnoli), castagnoli, payload)
}

// commit makes every record added before the call durable: it writes them
// at the end of the current file and fdatasyncs it. When the file is full
// it first moves to the other one and starts a checkpoint. before, if not
// nil, runs once the records are taken and before they are written: what
// it flushes (the files the records name but do not hold) then covers
// every record written.
func (j *journal) commit(before func() error) (after []func(), err error) {
	if err := j.err(); err != nil {
		return nil, err
	}
	j.mu.Lock()
	buf, after := j.pending, j.after
	j.pending, j.after = j.spare[:0], nil
	j.taken = j.lastSeq
	j.mu.Unlock()
	if len(buf) == 0 {
		j.spare = buf
		return after, nil // their records are committed already
	}
	if before != nil {
		if err := before(); err != nil {
			return nil, j.stop("flush before a journal commit", err)
		}
	}
	if j.off+int64(len(buf)) > j.limit && j.off > j.lapSize() {
		carried, err := j.next()
		if err != nil {
			return nil, j.stop("journal lap change", err)
		}
		buf = append(buf, carried...)
	}
	stamp(buf, j.lap)
	if err := j.write(j.cur, buf, j.off); err != nil {
		// The records may be half written: they end the lap at replay.
		// The writes they describe are on disc already, and some callers
		// were told of them failing: no later commit may make them
		// durable (a retried write can also succeed over a writeback the
		// kernel dropped). Every later commit fails.
		return nil, j.stop("journal write", err)
	}
	j.off += int64(len(buf))
	j.spare = buf
	return after, nil
}

// carried is the records of the holds a commit has taken (Root.Hold):
// writes whose records are written, or being written now, but which are not
// yet done on disc. A new lap says them again: the checkpoint that lets the
// older laps go began before those writes were done. Holds added since the
// last take are left out: their records come in a later commit of the new
// lap, and said ahead of their companions (a move's destination) they would
// replay a removal without what replaces it.
func (j *journal) carried() []byte {
	j.mu.Lock()
	defer j.mu.Unlock()
	seqs := make([]uint64, 0, len(j.holds))
	for seq := range j.holds {
		if seq <= j.taken {
			seqs = append(seqs, seq)
		}
	}
	slices.Sort(seqs)
	var b []byte
	for _, seq := range seqs {
		b = appendRecord(b, j.holds[seq])
	}
	return b
}

// hold records a write, as add does, that its store does only once a
// commit holds the record; until release, every new lap says it again.
func (j *journal) hold(r record) (release func()) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.pending = appendRecord(j.pending, r)
	if j.holds == nil {
		j.holds = map[uint64]record{}
	}
	j.lastSeq++
	seq := j.lastSeq
	j.holds[seq] = r
	return func() {
		j.mu.Lock()
		delete(j.holds, seq)
		j.mu.Unlock()
	}
}

// next starts the other file with the next lap. The other file still holds
// the lap before the current one, which may be overwritten only once the
// checkpoint begun when the current lap started has made its writes
// durable; and a new checkpoint begins now for the current lap's writes.
// It returns the records of writes committed but not yet done (carried),
// which the new lap must record again.
func (j *journal) next() (carried []byte, err error) {
	if j.ckpt != nil {
		err := <-j.ckpt
		j.ckpt = nil
		if err != nil {
			// The other file's lap is all that holds those writes now.
			return nil, j.stop("journal checkpoint", err)
		}
	}
	other := 1 - j.cur
	lap := j.lap + 1
	if err := j.startLap(other, lap); err != nil {
		return nil, err
	}
	j.cur, j.lap, j.off = other, lap, j.lapSize()
	// Listed before the checkpoint begins: a write done by then is covered.
	carried = j.carried()
	ckpt := make(chan error, 1)
	j.ckpt = ckpt
	go func() { ckpt <- j.checkpoint() }()
	return carried, nil
}

// lapSize is the size of a lap record.
func (j *journal) lapSize() int64 { return int64(headerSize + fixedSize + len(j.lapData)) }

// startLap writes the lap record at the start of file i and makes it
// durable, so that a replay no longer reads what followed it before.
func (j *journal) startLap(i int, lap uint64) error {
	rec := appendRecord(nil, record{Op: opLap, Data: j.lapData})
	stamp(rec, lap)
	return j.write(i, rec, 0)
}

// write puts b at off in file i and fdatasyncs it. Where b would reach past
// the zeros written so far, the file first grows, with its own fdatasync:
// so only one commit in many changes the file's size.
func (j *journal) write(i int, b []byte, off int64) error {
	if j.failWrite != nil {
		return j.failWrite
	}
	f := j.files[i]
	if end := off + int64(len(b)); end > j.sizes[i] {
		size := max(end, j.sizes[i]+min(max(j.sizes[i], minGrow), maxGrow))
		size = (size + minGrow - 1) / minGrow * minGrow
		for at := j.sizes[i]; at < size; at += maxGrow {
			if _, err := f.WriteAt(zeros[:min(maxGrow, size-at)], at); err != nil {
				return fmt.Errorf("grow journal: %w", err)
			}
		}
		if err := j.aio.fdatasync(int(f.Fd())); err != nil {
			return fmt.Errorf("grow journal: %w", err)
		}
		j.sizes[i] = size
	}
	if _, err := f.WriteAt(b, off); err != nil {
		return fmt.Errorf("write journal: %w", err)
	}
	if err := j.aio.fdatasync(int(f.Fd())); err != nil {
		return fmt.Errorf("fdatasync journal: %w", err)
	}
	return nil
}

// reset forgets every record but carried (writes committed, not yet done:
// Root.Hold), which the new lap records again: call it once the
// writes the others describe are durable (after replay and a checkpoint at
// start-up, or after a last checkpoint at a clean stop). It clears the lap
// record of the file with the older lap, then starts a new lap, numbered
// two after the newest, in the file that held the newest; the files keep
// their size (and their zeroed blocks).
//
// The order matters if the power goes in between. The newest lap alone
// replays to the last recorded state of every file it names, which is what
// the disc durably holds by now; the older lap alone would take those files
// back to older states.
func (j *journal) reset(carried []byte) error {
	if j.ckpt != nil {
		err := <-j.ckpt
		j.ckpt = nil
		if err != nil {
			_ = j.stop("journal checkpoint", err)
		}
	}
	if err := j.err(); err != nil {
		return err
	}
	var newest uint64
	keep := 0
	for _, l := range j.laps() {
		if l.lap >= newest {
			newest, keep = l.lap, l.file
		}
	}
	if other := 1 - keep; j.sizes[other] > 0 {
		if err := j.write(other, make([]byte, j.lapSize()), 0); err != nil {
			return fmt.Errorf("reset journal: %w", err)
		}
	}
	if j.halfReset != nil {
		if err := j.halfReset(); err != nil {
			return err
		}
	}
	// Two laps on: a lap left in the other file by an earlier run can never
	// look like the one before this.
	j.cur, j.lap, j.off = keep, newest+2, j.lapSize()
	if err := j.startLap(keep, j.lap); err != nil {
		return err
	}
	if err := syncDir(j.dir); err != nil {
		return err
	}
	if len(carried) > 0 {
		stamp(carried, j.lap)
		if err := j.write(j.cur, carried, j.off); err != nil {
			return fmt.Errorf("reset journal: %w", err)
		}
		j.off += int64(len(carried))
	}
	// The laps a stopped run left are settled: nothing is left to replay.
	switch err := os.Remove(filepath.Join(j.dir, stoppedName)); {
	case err == nil:
		return syncDir(j.dir)
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("reset journal: %w", err)
	}
	return nil
}

// settle makes every write so far durable with a checkpoint, then forgets
// the records (reset): at start-up after replay, and at a clean stop, so
// that the next start has nothing to replay.
func (j *journal) settle() error {
	if err := j.err(); err != nil {
		return err
	}
	// Listed before the checkpoint begins: a write done by then is covered.
	carried := j.carried()
	if err := j.checkpoint(); err != nil {
		return j.stop("journal checkpoint", err)
	}
	return j.reset(carried)
}

// close closes the files; records not committed are lost (they were never
// acknowledged).
func (j *journal) close() error {
	if j.ckpt != nil {
		<-j.ckpt
		j.ckpt = nil
	}
	errs := []error{j.aio.close()}
	for i, f := range j.files {
		if f != nil {
			errs = append(errs, f.Close())
			j.files[i] = nil
		}
	}
	return errors.Join(errs...)
}

// BootEnv, when set, stands for the kernel's boot id: tests set it to
// another value to make a start-up look like the first after a reboot.
const BootEnv = "TASKHOSTER_TEST_BOOT_ID"

// bootID names the kernel's current boot. A journal written in the same
// boot as the start-up replaying it was left by a process that died with
// the page cache intact: the files already hold every record, and newer
// changes besides (replay).
func bootID() string {
	if id := os.Getenv(BootEnv); id != "" {
		return id
	}
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "" // unknown: every start-up replays
	}
	return strings.TrimSpace(string(b))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync journal folder: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync journal folder: %w", err)
	}
	return nil
}
