// Package durable is the server's durability (SPEC §6): the write-ahead
// journal of the task files and the event log, its checkpoints, its replay
// after a power loss, and the group commit that makes a write durable
// before the client is told (ports.Syncer).
//
// Under --sync always every task-file write and every event line is also
// recorded in <items>/.journal/, and a write is durable once its record is:
// a group commit costs one fdatasync of a few sequential kilobytes instead
// of a flush of every task file, directory and inode the batch touched
// (ARCHITECTURE.md, "The file store and durability"). One commit serves
// every caller that asked while the previous one ran, so a busy server pays
// for a few commits a second, not one per request ("Concurrent writes may
// share one fsync").
//
// The files are still written in full, each write's record added once it is
// done, or, for a write that destroys a file's last durable content (a
// move's source, a rewrite's rename), before it is done and the write only
// once a commit holds the record (Root.Hold, AfterCommit): they are what a
// reader and a restart see. The journal only matters after a power loss (or a
// kernel crash): at the first start-up after the reboot, Replay rewrites
// each file whose data never reached the disc from its record; and after a
// failed flush stopped it, when the page cache may have dropped such data,
// at the next start-up whatever the boot (stoppedName). A
// checkpoint (syncfs of the items' and logs' filesystems, run in the
// background) makes every file written so far durable, after which the
// records before it are no longer needed.
//
// The journal is two files used in turn. Each begins with a lap record
// naming its lap number, the boot and the folders; when the one being
// written reaches its size limit the other is started with the next lap,
// and a checkpoint begins. The other file is only overwritten once that
// checkpoint is done, so the two files together always hold every write
// since the older lap began: Replay applies both laps, older first.
//
// The stores see none of this: each is handed a Root, the journal of its
// folder, through an interface it declares itself (fsstore.Journal,
// eventlog.Journal).
package durable

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

var (
	_ ports.Syncer = (*Syncer)(nil)
	_ ports.Syncer = None{}
)

// RootName names a folder the journal covers.
type RootName string

const (
	Items RootName = "items" // the items folder: task files
	Logs  RootName = "logs"  // the logs folder: event-log lines
)

// rootNames is the roots' order on disc: a record's root byte is its
// root's place here, and a lap record lists the folders in this order. A
// journal written by an earlier version must still replay, so it never
// changes.
var rootNames = [...]RootName{Items, Logs}

// journalDir is the journal's folder in the items folder. Its name cannot
// be a host's (host names do not begin with a dot), so the store's scan
// passes it by.
const journalDir = ".journal"

// DefaultLimit is the size at which a journal file is left for the other
// and a checkpoint begins: large enough that checkpoints are a few seconds
// apart at full speed, small enough that a replay after a power loss is
// quick.
const DefaultLimit = 32 << 20

// Config says which folders the journal covers and whether it records.
type Config struct {
	Items string // the items folder; the journal is in <Items>/.journal
	Logs  string // the logs folder
	// Record is --sync always: every write is recorded and Sync commits.
	// Without it (--sync none) nothing is recorded and Sync returns at
	// once, but a journal a crashed run under --sync always left is still
	// replayed (Replay) and then removed (Settle), so that no later run
	// replays its old records over this run's writes.
	Record bool
	// Limit is the size of a lap (0: DefaultLimit).
	Limit int64
	// Checkpoint makes every file written so far durable (nil: syncfs of
	// the filesystems holding Items and Logs). Tests replace it.
	Checkpoint func() error
	Logger     *zap.Logger // nil: nothing is logged
}

// Syncer is the durability adapter: the journal, written through the Roots
// it hands out, and group commit over it. Open it, hand its Roots to the
// stores, Close it after them.
type Syncer struct {
	record bool
	dir    string // the journal's folder
	log    *zap.Logger

	// commitMu lets one of commit, Settle and Close at a time touch the
	// journal's files: a clean stop's Settle may meet a commit still
	// running for a caller that gave up waiting.
	commitMu sync.Mutex
	journal  *journal     // nil: no journal (--sync none, or its leftover removed)
	fsys     *fileSystems // the checkpoint's filesystems; nil with Config.Checkpoint
	// beforeCommit flushes what the roots' owners write beside their
	// records (BeforeCommit); set before serving, then only read.
	beforeCommit []func() error

	mu       sync.Mutex
	observer FlushObserver // told of every flush; nil: nobody is
	running  bool          // a flush loop is going
	next     *batch        // callers waiting for a flush that has not started yet
	closed   bool
	loop     sync.WaitGroup
	// expected counts the callers on their way (Expect) that no Arrive or
	// Unexpect has met yet; arrived, while a flush waits for them, is
	// closed by the next of those (meet).
	expected int
	arrived  chan struct{}
	// expectWait bounds the wait for an expected caller; 0: ExpectWait.
	expectWait time.Duration

	// flush is one group commit, returning what is to run after it:
	// commitRecords, but for the group commit's tests.
	flush func() (after []func(), err error)
}

// Open opens the journal in cfg.Items/.journal (under Record, creating it
// and the folders; otherwise only if a run under --sync always left one).
// It does not replay: the items folder's store calls Replay once it holds
// the folder's lock, and then Settle.
func Open(cfg Config) (*Syncer, error) {
	s := &Syncer{record: cfg.Record, dir: filepath.Join(cfg.Items, journalDir), log: cfg.Logger}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	s.flush = s.commitRecords
	if !cfg.Record {
		if _, err := os.Stat(s.dir); err != nil {
			return s, nil // nothing left over
		}
	}
	for _, d := range []string{cfg.Items, cfg.Logs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("open journal: %w", err)
		}
	}
	checkpoint := cfg.Checkpoint
	if checkpoint == nil {
		fsys, err := openFileSystems(cfg.Items, cfg.Logs)
		if err != nil {
			return nil, err
		}
		s.fsys, checkpoint = fsys, fsys.flushAll
	}
	limit := cfg.Limit
	if limit == 0 {
		limit = DefaultLimit
	}
	j, err := openJournal(s.dir, limit, checkpoint, []string{cfg.Items, cfg.Logs}) // rootNames' order
	if err != nil {
		_ = s.closeFiles()
		return nil, err
	}
	s.journal = j
	return s, nil
}

// Root is the journal of one folder: each store records its writes through
// its own, by paths inside that folder. Under --sync none it records
// nothing.
type Root struct {
	s     *Syncer
	index int // the root's byte on disc: its place in rootNames
}

// Root returns the journal of the folder name.
func (s *Syncer) Root(name RootName) *Root { return &Root{s: s, index: rootIndex(name)} }

// rootIndex is name's place in rootNames.
func rootIndex(name RootName) int {
	for i, n := range rootNames {
		if n == name {
			return i
		}
	}
	panic("durable: no root " + string(name)) // a wiring bug
}

func (r *Root) add(o op, path string, off int64, data []byte) {
	if r.s.record {
		r.s.journal.add(o, r.index, path, off, data)
	}
}

// Put records that the file at path now holds data. Call it after the
// write succeeded (Hold, for one done only after a commit) and before the
// Sync that acknowledges it.
func (r *Root) Put(path string, data []byte) { r.add(opPut, path, 0, data) }

// Remove records that the file at path is gone.
func (r *Root) Remove(path string) { r.add(opRemove, path, 0, nil) }

// Append records that the file at path holds data from byte off (a line
// appended to a log).
func (r *Root) Append(path string, off int64, data []byte) { r.add(opAppend, path, off, data) }

// BeforeCommit has flush run in every commit, once its records are taken
// and before they are written, for what the folder's owner writes without
// recording it (the event log's archived payloads): it is durable before
// any record naming it is. Call it before serving.
func (r *Root) BeforeCommit(flush func() error) {
	r.s.beforeCommit = append(r.s.beforeCommit, flush)
}

// Hold records that the file at path holds data (Put), or is gone (data
// nil: Remove), for a write its store does only after a commit holds the
// record: a move's source retired once its destination is durable, a
// rewrite renamed once its record is. A checkpoint lets the laps before it
// go, which is right only for writes the disc had begun to hold when it
// began; so until release every new lap that begins after a commit took
// the record says it again, after its own first records (a torn commit cuts
// the repeat, never a record ahead of its companions).
func (r *Root) Hold(path string, data []byte) (release func()) {
	if !r.s.record {
		return func() {}
	}
	o := opPut
	if data == nil {
		o = opRemove
	}
	return r.s.journal.hold(record{Op: o, Root: r.index, Path: path, Data: data})
}

// AfterCommit has fn run once a commit holds every record added before the
// call: just after the callers of Sync that commit serves are woken, and
// before the next commit or Settle; under --sync none, at once. fn runs on
// the committing goroutine, under the commit's lock: it must be short and
// must not wait for a commit.
func (r *Root) AfterCommit(fn func()) {
	if !r.s.record {
		fn()
		return
	}
	r.s.journal.afterCommit(fn)
}

// Recording says whether the root's writes are recorded (--sync always).
func (r *Root) Recording() bool { return r.s.record }

// Sync is Syncer.Sync: it returns once every record added before the call
// is durable.
func (r *Root) Sync(ctx context.Context) error { return r.s.Sync(ctx) }

// Err is the failure that stopped the journal (a failed commit, flush or
// checkpoint), after which every write fails until a restart; nil while
// it works. It does not wait for a commit: /healthz and /readyz ask it.
func (s *Syncer) Err() error {
	if !s.record { // s.journal is then only the leftover one, which Settle removes
		return nil
	}
	return s.journal.err()
}

// Replay and Settle are the whole journal's, not the root's: the items
// folder's store calls them, as the one that holds the folders' lock.

// Replay rewrites from the journal every file whose write a power loss may
// have taken (see journal.replay), and reports how many records it applied
// and how many files it changed. Call it before anything reads the files.
func (r *Root) Replay() (records, changed int, err error) { return r.s.Replay() }

// Settle makes every write so far durable and empties the journal (see
// Syncer.Settle).
func (r *Root) Settle() error { return r.s.Settle() }

// Replay is Root.Replay.
func (s *Syncer) Replay() (records, changed int, err error) {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	if s.journal == nil {
		return 0, 0, nil
	}
	return s.journal.replay()
}

// Settle makes every write so far durable with a checkpoint and empties
// the journal: at start-up once Replay's and the scan's repairs are made,
// and at a clean stop, so that the next start has nothing to replay. Under
// --sync none it removes a leftover journal instead, once replayed.
func (s *Syncer) Settle() error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	if s.journal == nil {
		return nil
	}
	if s.record {
		return s.journal.settle()
	}
	err := errors.Join(s.journal.settle(), s.closeFiles())
	s.journal = nil // a later Replay or Settle has nothing to do
	if err != nil {
		return err
	}
	if err := os.RemoveAll(s.dir); err != nil {
		return fmt.Errorf("remove the journal: %w", err)
	}
	s.log.Info("replayed and removed the journal of a run under --sync always")
	return nil
}

// commitRecords is one group commit: the journal takes the records added
// since the last commit, the roots' owners flush what they wrote beside
// those records, then the journal writes and fdatasyncs them. It returns
// what was to run after those records (AfterCommit), for run to call once
// it has woken the callers. A failed flush, or a failed checkpoint, fails
// this commit and every later one (journal.failed). The caller holds
// commitMu.
func (s *Syncer) commitRecords() (after []func(), err error) {
	if s.journal == nil {
		return nil, nil
	}
	return s.journal.commit(s.flushOwners)
}

// flushOwners runs the roots' owners' flushes (BeforeCommit) for a commit
// whose records are taken: each covers what those records name.
func (s *Syncer) flushOwners() error {
	for _, flush := range s.beforeCommit {
		if err := flush(); err != nil {
			return err
		}
	}
	return nil
}

// FlushObserver is told of every flush, for metrics (metrics.Metrics): how
// long it took, how many callers it served and whether it failed.
type FlushObserver interface {
	Flushed(d time.Duration, callers int, err error)
}

// Observe has o told of every flush, from the flushing goroutine.
func (s *Syncer) Observe(o FlushObserver) {
	s.mu.Lock()
	s.observer = o
	s.mu.Unlock()
}

// batch is the callers served by one flush.
type batch struct {
	done    chan struct{} // closed once the batch is durable
	err     error
	callers int
}

// Sync returns once every write recorded before the call is on stable
// storage: once a commit that began after the call has finished, or at
// once when no write is waiting for one (nothing recorded since the last
// commit, and no commit under way). A failed commit fails every caller it
// served, with a KindUnavailable error. A cancelled ctx stops the wait,
// not the commit. Under --sync none it returns at once.
//
// Readers call it too, before they show what they read (app.Service's
// Status, Watch and ListTasks, eventlog.Reader.Durable): on an idle server
// that costs them nothing.
func (s *Syncer) Sync(ctx context.Context) error { return s.join(ctx, false) }

// Expect says a caller is on its way to Arrive: a claim just woken for a
// task a post has made claimable, the post about to Sync. The next flush
// to begin waits for it, up to ExpectWait, so that the two writes share
// one commit: a task handed straight to a waiting worker then reaches it
// one commit after its post, not two. Unexpect withdraws it when the woken
// claim takes nothing. Under --sync none it does nothing. notify.Hub.OnWake
// runs both.
func (s *Syncer) Expect() {
	if !s.record {
		return
	}
	s.mu.Lock()
	s.expected++
	s.mu.Unlock()
}

// Unexpect withdraws one expectation (Expect): the claim woken took
// nothing, and no other claim was woken in its place.
func (s *Syncer) Unexpect() {
	if !s.record {
		return
	}
	s.mu.Lock()
	s.meet()
	s.mu.Unlock()
}

// Arrive is Sync for a caller that may be one Expect announced: it meets
// one expectation, if any is open, as it joins the next flush, both under
// one lock so that the flush it lets begin is one that serves it. Any
// caller may meet any expectation; a claim nobody woke meets one that a
// woken claim would have, and joins the same flush in its place.
func (s *Syncer) Arrive(ctx context.Context) error { return s.join(ctx, true) }

// join waits for a flush begun after the call (Sync); arriving, it first
// meets an expectation (Arrive).
func (s *Syncer) join(ctx context.Context, arriving bool) error {
	if !s.record {
		return nil
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return domain.E(domain.KindUnavailable, domain.CodeStorageUnavailable, "syncer is closed")
	}
	if arriving {
		s.meet()
	}
	if !s.running && s.journal != nil && s.journal.idle() {
		// No commit is under way, nor its AfterCommit calls (running is
		// cleared after them: a caller may count on a move's retire
		// being done once a later Sync returns), and none is needed.
		s.mu.Unlock()
		return s.journal.err()
	}
	// Join the batch for the next flush. A flush running now may have
	// started before our caller's write, so it cannot serve us.
	if s.next == nil {
		s.next = &batch{done: make(chan struct{})}
	}
	b := s.next
	b.callers++
	if !s.running {
		s.running = true
		s.loop.Go(s.run)
	}
	s.mu.Unlock()

	select {
	case <-b.done:
		return b.err
	case <-ctx.Done():
		return fmt.Errorf("wait for flush: %w", ctx.Err())
	}
}

// meet closes one open expectation, if any, waking a flush that waits for
// it. The caller holds s.mu.
func (s *Syncer) meet() {
	if s.expected == 0 {
		return
	}
	s.expected--
	if s.arrived != nil {
		close(s.arrived)
		s.arrived = nil
	}
}

// ExpectWait is how long a flush waits at most for the callers Expect
// announced. A woken claim records its write within tens of microseconds
// on an idle server, and one that takes nothing withdraws (Unexpect): the
// bound caps what a post pays for a claim slow to run.
const ExpectWait = 500 * time.Microsecond

// run flushes batch after batch until no caller is waiting. Callers who
// arrive during a flush gather in s.next and are served together by the
// following one.
func (s *Syncer) run() {
	s.mu.Lock()
	for s.next != nil {
		s.gather()
		b := s.next
		s.next = nil
		observer := s.observer
		s.mu.Unlock()

		// commitMu is held from the commit to its AfterCommit calls, so
		// that no other commit or Settle begins a lap in between (see
		// Root.Hold). The callers are woken before those calls: what they
		// do (a moved task's old file set aside) is no part of what the
		// callers were promised, and under load they took about 15 % of
		// the time a caller waited (BENCHMARKS.md, "Issue 17").
		s.commitMu.Lock()
		start := time.Now()
		after, err := s.flush()
		if observer != nil {
			// b.callers is complete: b left s.next under the lock.
			observer.Flushed(time.Since(start), b.callers, err)
		}
		if err != nil {
			b.err = &domain.Error{
				Kind: domain.KindUnavailable, Code: domain.CodeStorageUnavailable,
				Message: "flush to stable storage failed", Err: err,
			}
		}
		close(b.done)
		for _, fn := range after {
			fn()
		}
		s.commitMu.Unlock()

		s.mu.Lock()
	}
	s.running = false
	s.mu.Unlock()
}

// gatherYields bounds the yields of gather before one flush.
const gatherYields = 3

// gather lets the callers that are ready to run join the next batch before
// its flush begins: it yields the processor while doing so brings more, a
// few times at most. On a busy server, when the loop comes round again,
// handlers that have written their records are runnable but have not yet
// reached Sync (the processors are busy with those the last flush woke):
// flushing at once serves the one that got there first and leaves the rest
// for the flush after. While a commit still set aside its moves' old files
// before waking its callers, half the flushes then served a single caller;
// since run does that after the wake, without the yields there are 10-20 %
// more flushes under load, and no more tasks/s (BENCHMARKS.md, "Tried and
// not kept"). A yield sets no timer and costs microseconds on an idle server,
// so a lone caller there is not held up (unless a claim is expected:
// awaitExpected). The caller holds s.mu, and s.next is not nil.
func (s *Syncer) gather() {
	s.awaitExpected()
	for range gatherYields {
		n := s.next.callers
		s.mu.Unlock()
		runtime.Gosched()
		s.mu.Lock()
		if s.next.callers == n {
			return
		}
	}
}

// awaitExpected waits for the callers Expect announced, up to expectWait.
// Those not met by then are forgotten: each flush waits for the
// expectations made since the one before it began, at most once. The
// caller holds s.mu.
func (s *Syncer) awaitExpected() {
	defer func() { s.expected = 0 }()
	if s.expected == 0 {
		return
	}
	wait := s.expectWait
	if wait == 0 {
		wait = ExpectWait
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for s.expected > 0 {
		arrived := make(chan struct{})
		s.arrived = arrived
		s.mu.Unlock()
		select {
		case <-arrived:
			s.mu.Lock()
		case <-timer.C:
			s.mu.Lock()
			s.arrived = nil
			return
		}
	}
}

// Close refuses further Syncs, waits for the commits already asked for and
// closes the journal's files. It does not settle (the items folder's store
// does, at its Close): records not committed are lost, as they were never
// acknowledged.
func (s *Syncer) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.loop.Wait()
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	return s.closeFiles()
}

// closeFiles closes the journal and the checkpoint's directories; closing
// twice is harmless. s.journal stays set: under --sync always a Root reads
// it without commitMu. The caller holds commitMu, or is Open.
func (s *Syncer) closeFiles() error {
	var errs []error
	if s.journal != nil {
		errs = append(errs, s.journal.close())
	}
	if s.fsys != nil {
		errs = append(errs, s.fsys.close())
	}
	return errors.Join(errs...)
}

// None is a Syncer that does nothing, for tests of other adapters that
// need no durability.
type None struct{}

// Sync does nothing.
func (None) Sync(context.Context) error { return nil }
