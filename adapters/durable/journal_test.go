package durable

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rig is a journal over two roots in a temp folder, with a checkpoint that
// counts its calls and can be made to fail.
type rig struct {
	t     *testing.T
	dir   string
	roots []string

	mu          sync.Mutex // checkpoints run in the background
	checkpoints int
	failCkpt    error
	boots       int
}

func (r *rig) failCheckpoints(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failCkpt = err
}

func (r *rig) checkpointCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.checkpoints
}

func newRig(t *testing.T) *rig {
	dir := t.TempDir()
	r := &rig{t: t, dir: dir, roots: []string{filepath.Join(dir, "items"), filepath.Join(dir, "logs")}}
	for _, root := range r.roots {
		if err := os.MkdirAll(root, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// open opens the journal as a start-up does, and replays it (Reset is the
// test's to call). Each open is in a boot of its own, as after a power loss.
func (r *rig) open(limit int64) (*Syncer, int, int) {
	r.t.Helper()
	r.boots++
	r.t.Setenv(BootEnv, fmt.Sprintf("boot-%d", r.boots))
	j, err := Open(Config{Items: r.roots[0], Logs: r.roots[1], Record: true, Limit: limit, Checkpoint: func() error {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.checkpoints++
		return r.failCkpt
	}})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = j.Close() })
	records, changed, err := j.Replay()
	if err != nil {
		r.t.Fatal(err)
	}
	return j, records, changed
}

// start opens a journal with nothing to replay and starts its first lap.
func (r *rig) start(limit int64) *Syncer {
	r.t.Helper()
	j, _, _ := r.open(limit)
	if err := j.journal.reset(nil); err != nil {
		r.t.Fatal(err)
	}
	return j
}

func (r *rig) path(root RootName, rel string) string {
	return filepath.Join(r.roots[r.index(root)], rel)
}

// index is root's place in r.roots, which are in rootNames' order.
func (r *rig) index(root RootName) int { return rootIndex(root) }

func (r *rig) write(root RootName, rel string, data []byte) {
	r.t.Helper()
	p := r.path(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// put writes a file and records the write in j, as the stores do.
func (r *rig) put(j *Syncer, root RootName, rel string, data []byte) {
	r.t.Helper()
	r.write(root, rel, data)
	j.Root(root).Put(rel, data)
}

func (r *rig) read(root RootName, rel string) (string, bool) {
	b, err := os.ReadFile(r.path(root, rel))
	if errors.Is(err, os.ErrNotExist) {
		return "", false
	}
	if err != nil {
		r.t.Fatal(err)
	}
	return string(b), true
}

func mustCommit(t *testing.T, j *Syncer) {
	t.Helper()
	if err := j.commit(); err != nil {
		t.Fatal(err)
	}
}

// TestReplayRestoresWhatAPowerLossTook is the journal's purpose: files whose
// writes were committed but whose data never reached the disc (gone, empty,
// an older content) are written again at start-up, removals are redone, and
// log lines come back at their offsets.
func TestReplayRestoresWhatAPowerLossTook(t *testing.T) {
	r := newRig(t)
	j := r.start(DefaultLimit)
	r.put(j, Items, "h/q/pending/a.json", []byte(`{"a":1}`))
	r.put(j, Items, "h/q/processing/a.json", []byte(`{"a":2}`))
	_ = os.Remove(r.path(Items, "h/q/pending/a.json"))
	j.Root(Items).Remove("h/q/pending/a.json")
	r.put(j, Items, "h/q/done/b.json", []byte(`{"b":1}`))
	r.write(Logs, "tasks/day.jsonl", []byte("line1\nline2\n"))
	j.Root(Logs).Append("tasks/day.jsonl", 0, []byte("line1\n"))
	j.Root(Logs).Append("tasks/day.jsonl", 6, []byte("line2\n"))
	mustCommit(t, j)
	_ = j.Close()

	// The power loss: the pending copy is back (its unlink was lost), the
	// processing file is empty, b holds stale bytes, the log lost a line.
	r.write(Items, "h/q/pending/a.json", []byte(`{"a":1}`))
	r.write(Items, "h/q/processing/a.json", nil)
	r.write(Items, "h/q/done/b.json", []byte(`{"stale":true}`))
	r.write(Logs, "tasks/day.jsonl", []byte("line1\n"))

	_, records, changed := r.open(DefaultLimit)
	// Changed: processing/a, the removal of pending/a, b, and line 2.
	if records != 6 || changed != 4 {
		t.Errorf("replay read %d records and made %d changes, want 6 and 4", records, changed)
	}
	if _, ok := r.read(Items, "h/q/pending/a.json"); ok {
		t.Error("pending/a.json is back after replay; its removal was committed")
	}
	for rel, want := range map[string]string{"h/q/processing/a.json": `{"a":2}`, "h/q/done/b.json": `{"b":1}`} {
		if got, _ := r.read(Items, rel); got != want {
			t.Errorf("%s = %q after replay, want %q", rel, got, want)
		}
	}
	if got, _ := r.read(Logs, "tasks/day.jsonl"); got != "line1\nline2\n" {
		t.Errorf("day file = %q after replay", got)
	}
}

// TestReplayChangesNothingWhenTheFilesAgree: after a crash without a power
// loss, or a clean stop, replay reads the records and leaves every file be.
func TestReplayChangesNothingWhenTheFilesAgree(t *testing.T) {
	r := newRig(t)
	j := r.start(DefaultLimit)
	r.put(j, Items, "h/q/pending/a.json", []byte(`{"a":1}`))
	j.Root(Items).Remove("h/q/pending/gone.json")
	mustCommit(t, j)
	_ = j.Close()
	before, _ := os.Stat(r.path(Items, "h/q/pending/a.json"))
	_, records, changed := r.open(DefaultLimit)
	after, _ := os.Stat(r.path(Items, "h/q/pending/a.json"))
	if records != 2 || changed != 0 {
		t.Errorf("replay read %d records and changed %d files, want 2 and 0", records, changed)
	}
	if !os.SameFile(before, after) {
		t.Error("replay rewrote a file that already held its record")
	}
}

// TestAJournalOfThisBootIsNotReplayed: a process killed without a reboot
// left its page cache, so the files are as new as the journal or newer (a
// claim never committed, say); replaying older records would undo that.
func TestAJournalOfThisBootIsNotReplayed(t *testing.T) {
	r := newRig(t)
	j := r.start(DefaultLimit)
	j.Root(Items).Put("h/q/processing/a.json", []byte("claimed"))
	mustCommit(t, j)
	_ = j.Close()
	// Since then, uncommitted: the claim was undone by a re-queue.
	r.write(Items, "h/q/pending/a.json", []byte("requeued"))

	again, err := Open(Config{Items: r.roots[0], Logs: r.roots[1], Record: true, Checkpoint: func() error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if records, _, err := again.Replay(); err != nil || records != 0 {
		t.Errorf("replay in the same boot applied %d records (%v)", records, err)
	}
	if _, ok := r.read(Items, "h/q/processing/a.json"); ok {
		t.Error("replay in the same boot brought back the claimed copy")
	}
}

// TestAStoppedJournalIsReplayedInTheSameBoot: after a failed flush the page
// cache may have dropped what the disc never got, so the start-up after
// the stop replays even a journal of its own boot; once that is settled,
// the next start-up in the boot trusts the page cache again.
func TestAStoppedJournalIsReplayedInTheSameBoot(t *testing.T) {
	r := newRig(t)
	j := r.start(DefaultLimit)
	r.put(j, Items, "h/q/pending/a.json", []byte("posted"))
	mustCommit(t, j)
	j.journal.failWrite = errors.New("EIO")
	r.put(j, Items, "h/q/pending/b.json", []byte("posted, never committed"))
	if err := j.commit(); err == nil {
		t.Fatal("a commit whose write failed succeeded")
	}
	_ = j.Close()
	// The writeback of a.json failed with the commit of b: its page was
	// dropped, and the disc never held it.
	if err := os.Remove(r.path(Items, "h/q/pending/a.json")); err != nil {
		t.Fatal(err)
	}

	sameBoot := func() *Syncer {
		s, err := Open(Config{Items: r.roots[0], Logs: r.roots[1], Record: true, Checkpoint: func() error { return nil }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	again := sameBoot()
	if _, _, err := again.Replay(); err != nil {
		t.Fatal(err)
	}
	if got, _ := r.read(Items, "h/q/pending/a.json"); got != "posted" {
		t.Fatalf("a.json after the start-up that followed the stop: %q, want it replayed", got)
	}
	if err := again.Settle(); err != nil {
		t.Fatal(err)
	}
	_ = again.Close()

	// Settled: a crash now is a plain one, and the page cache is trusted.
	if err := os.Remove(r.path(Items, "h/q/pending/a.json")); err != nil {
		t.Fatal(err)
	}
	third := sameBoot()
	if records, _, err := third.Replay(); err != nil || records != 0 {
		t.Errorf("replay after the settled stop applied %d records (%v), want none", records, err)
	}
}

// TestUncommittedAndTornRecordsAreNotReplayed: records never committed are
// not on disc, and a record cut short by the crash ends the lap, with what
// came before it still replayed.
func TestUncommittedAndTornRecordsAreNotReplayed(t *testing.T) {
	r := newRig(t)
	j := r.start(DefaultLimit)
	j.Root(Items).Put("a.json", []byte("first"))
	mustCommit(t, j)
	end := j.journal.off
	j.Root(Items).Put("b.json", []byte("second"))
	mustCommit(t, j)
	j.Root(Items).Put("c.json", []byte("never committed"))
	_ = j.Close()
	// Tear the second record: its last byte never reached the disc.
	f, err := os.OpenFile(filepath.Join(r.roots[0], journalDir, fileNames[0]), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	second := appendRecord(nil, record{Op: opPut, Root: r.index(Items), Path: "b.json", Data: []byte("second")})
	if _, err := f.WriteAt([]byte{0}, end+int64(len(second))-1); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()

	_, records, _ := r.open(DefaultLimit)
	if records != 1 {
		t.Errorf("replayed %d records, want 1 (the torn one and what follows end the lap)", records)
	}
	if got, _ := r.read(Items, "a.json"); got != "first" {
		t.Errorf("a.json = %q", got)
	}
	for _, rel := range []string{"b.json", "c.json"} {
		if _, ok := r.read(Items, rel); ok {
			t.Errorf("%s was replayed", rel)
		}
	}
}

// TestATornLapChangeLosesNoMove: the commit that begins a new lap holds a
// move (its destination's record, then its source's removal, held until
// the store retires the source) and then says that hold again for the new
// lap (carried). The power goes while that commit is being written: cut at
// any byte, with the destination's data lost and the source's removal on
// disc, replay must still leave the task in one of the two files. Were
// the repeat said ahead of the commit's own records, a cut between them
// would replay the removal alone.
func TestATornLapChangeLosesNoMove(t *testing.T) {
	r := newRig(t)
	const limit = 4 << 10
	j := r.start(limit)
	src, dst := "h/q/pending/a.json", "h/q/processing/a.json"
	r.put(j, Items, src, []byte("posted"))
	mustCommit(t, j)
	// Fill the lap up to where the move's records no longer fit, whatever
	// the lap record's length (it names the folders, absolute).
	move := int64(len(appendRecord(appendRecord(nil,
		record{Op: opPut, Root: r.index(Items), Path: dst, Data: []byte("claimed")}),
		record{Op: opRemove, Root: r.index(Items), Path: src})))
	for i := 0; j.journal.off+move <= limit; i++ {
		size := 1
		if j.journal.off+move+600 <= limit {
			size = 500
		}
		r.put(j, Items, fmt.Sprintf("pad/%d.json", i), bytes.Repeat([]byte("x"), size))
		mustCommit(t, j)
	}
	lap := j.journal.lap

	r.put(j, Items, dst, []byte("claimed"))
	release := j.Root(Items).Hold(src, nil) // retired once the commit holds it
	defer release()
	start := j.journal.lapSize()
	mustCommit(t, j)
	if j.journal.lap != lap+1 {
		t.Fatalf("the move's commit stayed in lap %d: the test tests nothing", lap)
	}
	end := j.journal.off
	name := filepath.Join(r.roots[0], journalDir, fileNames[j.journal.cur])
	_ = j.Close()
	whole, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}

	// Cuts at each record's first, second and last byte and where its
	// payload begins, and after the last: every way the commit can end
	// (a start-up costs tens of milliseconds, so not every byte).
	var cuts []int64
	for at := start; at < end; {
		size := headerSize + int64(binary.LittleEndian.Uint32(whole[at+12:at+16]))
		cuts = append(cuts, at, at+1, at+headerSize, at+size-1)
		at += size
	}
	if len(cuts) != 3*4 {
		t.Fatalf("the lap change's commit holds %d records, want the move's two and the repeat", len(cuts)/4)
	}
	if last, _, ok := next(whole[cuts[8]:end]); !ok || last.Op != opRemove || last.Path != src {
		t.Fatalf("the commit's last record is %+v, want the repeat of the source's removal", last.record)
	}
	for _, cut := range append(cuts, end) {
		torn := slices.Clone(whole)
		clear(torn[cut:end])
		if err := os.WriteFile(name, torn, 0o600); err != nil {
			t.Fatal(err)
		}
		// The worst a power loss leaves of the files: the source's removal
		// reached the disc, the destination's data did not.
		for _, rel := range []string{src, dst} {
			if err := os.Remove(r.path(Items, rel)); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
		}
		again, _, _ := r.open(limit)
		_ = again.Close()
		got, atSrc := r.read(Items, src)
		if claimed, atDst := r.read(Items, dst); atDst {
			got = claimed
		} else if !atSrc {
			t.Fatalf("cut at byte %d of the lap change's commit (%d to %d): the task is in neither file", cut, start, end)
		}
		if got != "posted" && got != "claimed" {
			t.Fatalf("cut at byte %d: the task holds %q", cut, got)
		}
	}
}

// TestLapsTakeTurnsBehindCheckpoints: a full file hands over to the other,
// a checkpoint starts, and replay applies both laps, older first, so a
// path written in both ends with the newer record. The other file is only
// reused after the checkpoint has covered it.
func TestLapsTakeTurnsBehindCheckpoints(t *testing.T) {
	r := newRig(t)
	const limit = 4 << 10
	j := r.start(limit)
	startLap := j.journal.lap
	var last string
	for i := range 40 {
		last = fmt.Sprintf(`{"n":%d,"pad":"%0200d"}`, i, 0)
		r.put(j, Items, "x.json", []byte(last))
		j.Root(Items).Put(fmt.Sprintf("n/%d.json", i), []byte(last))
		mustCommit(t, j)
	}
	if j.journal.lap < startLap+2 {
		t.Fatalf("lap went from %d to %d; want at least two hand-overs", startLap, j.journal.lap)
	}
	_ = j.Close() // waits for the last checkpoint
	if n := r.checkpointCount(); n < 2 {
		t.Errorf("%d checkpoints for %d hand-overs", n, j.journal.lap-startLap)
	}
	r.write(Items, "x.json", []byte("lost"))
	_, records, _ := r.open(limit)
	if records == 0 || records >= 80 {
		t.Errorf("replayed %d records; want the last two laps' worth", records)
	}
	if got, _ := r.read(Items, "x.json"); got != last {
		t.Errorf("x.json = %q after replay, want the last write %q", got, last)
	}
}

// TestAFailedCheckpointStopsCommits: once a checkpoint has failed, no
// commit overwrites the lap it was to cover, nor goes on at all, even when
// a checkpoint tried again would succeed (after a failed writeback the
// kernel reports the error once and may have dropped the data): every
// commit and Settle fails until a restart, and the records of both laps
// are still there to replay.
func TestAFailedCheckpointStopsCommits(t *testing.T) {
	r := newRig(t)
	const limit = 2 << 10
	j := r.start(limit)
	r.failCheckpoints(errors.New("disc gone"))
	pad := bytes.Repeat([]byte("x"), 900)
	if err := j.Err(); err != nil {
		t.Fatalf("Err before anything failed = %v", err)
	}
	var err error
	i := 0
	for ; i < 20 && err == nil; i++ {
		r.put(j, Items, fmt.Sprintf("%d.json", i), pad)
		err = j.commit()
	}
	if err == nil {
		t.Fatal("commits went on with no checkpoint ever succeeding")
	}
	if got := j.Err(); got == nil || !strings.Contains(got.Error(), "disc gone") {
		t.Errorf("Err after the failed checkpoint = %v, want it", got)
	}
	r.failCheckpoints(nil)
	j.Root(Items).Put("later.json", pad)
	if err := j.commit(); err == nil {
		t.Error("a commit after a failed checkpoint succeeded")
	}
	if err := j.Settle(); err == nil {
		t.Error("Settle after a failed checkpoint succeeded")
	}
	_ = j.Close()
	// Every committed write is still in the journal: the power goes, the
	// files are lost, and replay brings each back.
	for n := range i - 1 {
		_ = os.Remove(r.path(Items, fmt.Sprintf("%d.json", n)))
	}
	r.open(limit)
	for n := range i - 1 {
		if got, _ := r.read(Items, fmt.Sprintf("%d.json", n)); got != string(pad) {
			t.Errorf("%d.json not replayed after the failed checkpoint", n)
		}
	}
}

// TestAFailedFlushBeforeACommitStopsCommits: when what the records name but
// do not hold (archived payloads) cannot be flushed, the records are not
// written, and no later commit writes them either.
func TestAFailedFlushBeforeACommitStopsCommits(t *testing.T) {
	r := newRig(t)
	j := r.start(DefaultLimit)
	fail := errors.New("archive gone")
	flushes := 0
	j.Root(Logs).BeforeCommit(func() error {
		flushes++
		if flushes == 1 {
			return fail
		}
		return nil
	})
	j.Root(Logs).Append("tasks/d.jsonl", 0, []byte("line\n"))
	if err := j.commit(); !errors.Is(err, fail) {
		t.Fatalf("commit = %v, want the flush's error", err)
	}
	if err := j.commit(); err == nil {
		t.Error("a commit after a failed flush succeeded")
	}
	_ = j.Close()
	if _, records, _ := r.open(DefaultLimit); records != 0 {
		t.Errorf("replayed %d records whose flush failed", records)
	}
}

// TestResetForgetsAndOldLapsStayOut: after Reset nothing replays, even the
// lap the other file still held.
func TestResetForgetsAndOldLapsStayOut(t *testing.T) {
	r := newRig(t)
	j := r.start(2 << 10)
	for i := range 10 {
		j.Root(Items).Put(fmt.Sprintf("%d.json", i), bytes.Repeat([]byte("y"), 500))
		mustCommit(t, j)
	}
	if err := j.Settle(); err != nil {
		t.Fatal(err)
	}
	_ = j.Close()
	if _, records, _ := r.open(2 << 10); records != 0 {
		t.Errorf("replayed %d records after Settle", records)
	}
}

// TestResetClearsTheOlderLapFirst: were the power to go half-way through a
// reset, after its first write, the lap left must be the newest, whose
// replay keeps each file at its last recorded content; the older lap on its
// own would take a file back to an older one.
func TestResetClearsTheOlderLapFirst(t *testing.T) {
	r := newRig(t)
	const limit = 2 << 10
	j := r.start(limit)
	startLap := j.journal.lap
	pad := strings.Repeat("p", 600)
	for i := 0; j.journal.lap < startLap+1; i++ {
		content := fmt.Sprintf(`{"n":%d,"pad":%q}`, i, pad)
		r.put(j, Items, "x.json", []byte(content))
		mustCommit(t, j)
	}
	last, _ := r.read(Items, "x.json")
	if laps := j.journal.laps(); len(laps) != 2 {
		t.Fatalf("%d laps; want two, so that there is an older one", len(laps))
	}
	// The power goes after Reset's first write.
	cut := errors.New("power cut")
	j.journal.halfReset = func() error { return cut }
	if err := j.journal.reset(nil); !errors.Is(err, cut) {
		t.Fatalf("reset: %v", err)
	}
	_ = j.Close()

	_, records, _ := r.open(limit)
	if records == 0 {
		t.Fatal("nothing replayed: the test tests nothing")
	}
	if got, _ := r.read(Items, "x.json"); got != last {
		t.Errorf("x.json = %.40q… after replaying what a half-done reset left, want the last write %.40q…", got, last)
	}
}

// TestReplayRefusesPathsOutsideTheRoots: a record cannot make replay write
// outside the folders the journal covers.
func TestReplayRefusesPathsOutsideTheRoots(t *testing.T) {
	for _, path := range []string{"../escape.json", "/etc/passwd", "", ".", "a/.."} {
		r := newRig(t)
		j := r.start(DefaultLimit)
		j.Root(Items).Put(path, []byte("x"))
		mustCommit(t, j)
		_ = j.Close()
		t.Setenv(BootEnv, "the next boot")
		j2, err := Open(Config{Items: r.roots[0], Logs: r.roots[1], Record: true, Checkpoint: func() error { return nil }})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := j2.Replay(); err == nil || !strings.Contains(err.Error(), "not a path the journal covers") {
			t.Errorf("replay of a record for %q: %v, want it refused before anything is written", path, err)
		}
		_ = j2.Close()
		if _, err := os.Stat(filepath.Join(r.dir, "escape.json")); err == nil {
			t.Errorf("replay wrote outside its roots for %q", path)
		}
	}
}

// TestReplayRefusesOtherFolders: after a crash, a start with another logs
// folder would put the journal's lines into the wrong day files; replay
// refuses and names the folder the records belong to.
func TestReplayRefusesOtherFolders(t *testing.T) {
	r := newRig(t)
	j := r.start(DefaultLimit)
	j.Root(Logs).Append("tasks/d.jsonl", 0, []byte("line\n"))
	mustCommit(t, j)
	_ = j.Close()
	moved := t.TempDir()
	t.Setenv(BootEnv, "the next boot")
	j2, err := Open(Config{Items: r.roots[0], Logs: moved, Record: true, Checkpoint: func() error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer j2.Close()
	_, _, err = j2.Replay()
	if err == nil || !strings.Contains(err.Error(), r.roots[1]) {
		t.Errorf("replay into another logs folder: %v", err)
	}
	if _, err := os.Stat(filepath.Join(moved, "tasks", "d.jsonl")); err == nil {
		t.Error("replay wrote into the other folder")
	}
}

// TestAJournalNamesItsFoldersAbsolutely: a server given relative folders
// and started again after a power loss from another working directory, its
// items folder named by another path, must not replay the logs folder's
// records into the "logs" of its new working directory: the lap names
// the folders it was written for by their absolute paths.
func TestAJournalNamesItsFoldersAbsolutely(t *testing.T) {
	first, second := t.TempDir(), t.TempDir()
	t.Chdir(first)
	t.Setenv(BootEnv, "boot-1")
	j, err := Open(Config{Items: "items", Logs: "logs", Record: true, Checkpoint: func() error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.journal.reset(nil); err != nil {
		t.Fatal(err)
	}
	j.Root(Logs).Append("tasks/d.jsonl", 0, []byte("line\n"))
	mustCommit(t, j)
	_ = j.Close()

	t.Chdir(second)
	t.Setenv(BootEnv, "boot-2")
	items := filepath.Join(first, "items")
	again, err := Open(Config{Items: items, Logs: "logs", Record: true, Checkpoint: func() error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if _, _, err := again.Replay(); err == nil || !strings.Contains(err.Error(), filepath.Join(first, "logs")) {
		t.Errorf("replay from another working directory: %v, want a refusal naming %s", err, filepath.Join(first, "logs"))
	}
	if _, err := os.Stat(filepath.Join(second, "logs", "tasks", "d.jsonl")); err == nil {
		t.Error("replay wrote into another working directory's logs folder")
	}

	// From the first working directory, with the same relative folders, it
	// replays.
	t.Chdir(first)
	_ = again.Close()
	back, err := Open(Config{Items: "items", Logs: "logs", Record: true, Checkpoint: func() error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	if records, _, err := back.Replay(); err != nil || records == 0 {
		t.Fatalf("replay from the first working directory: %d records, %v", records, err)
	}
	if b, err := os.ReadFile(filepath.Join(first, "logs", "tasks", "d.jsonl")); err != nil || string(b) != "line\n" {
		t.Errorf("day file after the replay: %q, %v", b, err)
	}
}

// FuzzParse: whatever a journal file holds, parsing it does not panic, and
// what it returns re-encodes to the bytes it came from.
func FuzzParse(f *testing.F) {
	lapRec := appendRecord(nil, record{Op: opLap})
	stamp(lapRec, 7)
	rec := appendRecord(nil, record{Op: opAppend, Root: 1, Path: "tasks/d.jsonl", Off: 42, Data: []byte("line\n")})
	stamp(rec, 7)
	f.Add(lapRec)
	f.Add(append(append([]byte{}, lapRec...), rec...))
	f.Add(append(append([]byte{}, lapRec...), rec[:len(rec)-1]...))
	f.Add([]byte(magic))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, ok := parse(data)
		if !ok {
			return
		}
		re := appendRecord(nil, record{Op: opLap, Data: []byte(strings.Join(l.roots, "\x00"))})
		for _, r := range l.records {
			re = appendRecord(re, r)
		}
		stamp(re, l.lap)
		if !bytes.HasPrefix(data, re) {
			t.Errorf("parsed records do not re-encode to their bytes")
		}
	})
}

// TestAJournalOfTheFirstFormatStillReplays: testdata/journal-v1 was
// written by adapters/journal before it moved into this package (roots
// "items" and "logs", relative to the folder it was written in, in boot
// "old-boot"; 30 puts of h/q/pending/a.json across several laps, then a
// removal and two log lines). A server upgraded after a power loss must
// still replay it: the format, the roots' order and the folder are on disc.
func TestAJournalOfTheFirstFormatStillReplays(t *testing.T) {
	var files [len(fileNames)][]byte
	for i, name := range fileNames {
		var err error
		if files[i], err = os.ReadFile(filepath.Join("testdata", "journal-v1", name)); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(t.TempDir())
	if err := os.MkdirAll(filepath.Join("items", journalDir), 0o750); err != nil {
		t.Fatal(err)
	}
	for i, name := range fileNames {
		if err := os.WriteFile(filepath.Join("items", journalDir, name), files[i], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r := &rig{t: t, roots: []string{"items", "logs"}}
	r.write(Items, "h/q/pending/gone.json", []byte("{}"))
	t.Setenv(BootEnv, "new-boot")
	s, err := Open(Config{Items: "items", Logs: "logs", Record: true, Checkpoint: func() error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	records, _, err := s.Replay()
	if err != nil || records == 0 {
		t.Fatalf("replay: %d records, %v", records, err)
	}
	if got, want := mustRead(t, r, Items, "h/q/pending/a.json"), fmt.Sprintf(`{"n":%d,"pad":"%0300d"}`, 29, 0); got != want {
		t.Errorf("a.json = %.20q…, want the last put %.20q…", got, want)
	}
	if _, ok := r.read(Items, "h/q/pending/gone.json"); ok {
		t.Error("gone.json is still there; its removal was committed")
	}
	if got := mustRead(t, r, Logs, "tasks/2026-01-01.jsonl"); got != "line1\nline2\n" {
		t.Errorf("day file = %q", got)
	}
}

func mustRead(t *testing.T, r *rig, root RootName, rel string) string {
	t.Helper()
	got, ok := r.read(root, rel)
	if !ok {
		t.Fatalf("%s/%s is missing", root, rel)
	}
	return got
}

// TestHeldWritesOutliveLapsAndSettle: a write held until done (a move's
// source still to retire, a rewrite still to rename) is said again by every
// lap that begins, once a commit has taken its record, so that neither the
// checkpoints behind lap changes nor a Settle lose it: were the power to
// go, replay still does it. A hold added after a commit took its records is
// not said ahead of them: its record comes with its companions, later.
func TestHeldWritesOutliveLapsAndSettle(t *testing.T) {
	r := newRig(t)
	const limit = 2 << 10
	j := r.start(limit)
	r.write(Items, "h/q/pending/a.json", []byte(`{"a":"stale"}`))
	r.write(Items, "h/q/processing/b.json", []byte(`{"b":"old"}`))
	releaseA := j.Root(Items).Hold("h/q/pending/a.json", nil)
	releaseB := j.Root(Items).Hold("h/q/processing/b.json", []byte(`{"b":"new"}`))
	mustCommit(t, j)
	startLap := j.journal.lap
	for i := 0; j.journal.lap < startLap+3; i++ {
		j.Root(Items).Put(fmt.Sprintf("n/%d.json", i), bytes.Repeat([]byte("z"), 500))
		mustCommit(t, j)
	}
	if err := j.Settle(); err != nil {
		t.Fatal(err)
	}
	// A hold whose record no commit has taken yet is not said by a new
	// lap: here, only by its own commit, which never comes.
	j.Root(Items).Put("h/q/processing/c.json", []byte(`{"c":1}`))
	releaseC := j.Root(Items).Hold("h/q/pending/c.json", nil)
	r.write(Items, "h/q/pending/c.json", []byte(`{"c":0}`))
	if err := j.Settle(); err != nil {
		t.Fatal(err)
	}
	_ = j.Close()
	releaseA()
	releaseB()
	releaseC()

	r.open(limit)
	if got, ok := r.read(Items, "h/q/pending/a.json"); ok {
		t.Errorf("pending/a.json = %q after replay; its removal was lost with its lap", got)
	}
	if got, _ := r.read(Items, "h/q/processing/b.json"); got != `{"b":"new"}` {
		t.Errorf("processing/b.json = %q after replay, want the held rewrite", got)
	}
	if _, ok := r.read(Items, "h/q/pending/c.json"); !ok {
		t.Error("pending/c.json removed by replay, though its move's destination was never committed")
	}
}

// TestAfterCommitRunsOnceItsRecordsAreDurable: what AfterCommit is given
// runs once a commit holds the records added before it: not before; after
// that commit's callers are woken, so that it costs them no wait; before
// the next commit; and never after a failed commit.
func TestAfterCommitRunsOnceItsRecordsAreDurable(t *testing.T) {
	r := newRig(t)
	j := r.start(DefaultLimit)
	release := make(chan struct{})
	ran := make(chan int64, 1)
	j.Root(Items).Put("a.json", []byte(`{}`))
	var started atomic.Bool
	j.Root(Items).AfterCommit(func() {
		started.Store(true)
		<-release
		ran <- j.journal.off
	})
	if started.Load() {
		t.Fatal("ran before any commit")
	}
	before := j.journal.off
	synced := make(chan error, 1)
	go func() { synced <- j.Sync(context.Background()) }()
	select {
	case err := <-synced:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		close(release)
		t.Fatal("Sync waited for what runs after its commit")
	}
	j.Root(Items).Put("b.json", []byte(`{}`))
	go func() { synced <- j.Sync(context.Background()) }()
	select {
	case <-synced:
		t.Fatal("the next commit began before what runs after the last one ended")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	if off := <-ran; off <= before {
		t.Fatalf("ran with the journal at offset %d; want the record written past %d", off, before)
	}
	if err := <-synced; err != nil {
		t.Fatal(err)
	}

	// After a commit that fails, it never runs: no later commit writes
	// its record (the journal stops, fail-stop).
	j.journal.failWrite = errors.New("disc full")
	j.Root(Items).Put("c.json", []byte(`{}`))
	ranAfterFailure := false
	j.Root(Items).AfterCommit(func() { ranAfterFailure = true })
	if err := j.commit(); err == nil {
		t.Fatal("commit succeeded with its write failing")
	}
	j.journal.failWrite = nil
	if err := j.commit(); err == nil {
		t.Fatal("a commit after a failed one succeeded")
	}
	if ranAfterFailure {
		t.Fatal("ran after a failed commit")
	}
}
