package bench

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestMachineTimesReadsIdleAndIOWait reads the first line of /proc/stat:
// the idle share counts idle and iowait, out of user to steal, and the
// guest columns (already in user) are not counted twice.
func TestMachineTimesReadsIdleAndIOWait(t *testing.T) {
	stat := "cpu  100 5 40 800 50 2 3 0 70 0\ncpu0 50 2 20 400 25 1 2 0 35 0\nintr 1 2 3\n"
	m, err := parseMachineTimes([]byte(stat))
	if err != nil {
		t.Fatal(err)
	}
	if m.total != 1000 || m.idle != 850 {
		t.Fatalf("got total %d idle %d, want 1000 and 850", m.total, m.idle)
	}
	for _, bad := range []string{"", "intr 1 2\n", "cpu 1 2 x 4 5\n", "cpu 1 2\n"} {
		if _, err := parseMachineTimes([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	// On this machine: shares between 0 and 100 once time has passed.
	start, err := readMachineTimes()
	if err != nil {
		t.Skipf("no /proc/stat: %v", err)
	}
	start.total-- // as if a tick had passed, so the shares are defined at once
	idle, kthreads := start.since()
	if idle == nil || *idle < 0 || *idle > 100 {
		t.Fatalf("idle since a moment ago: %v", idle)
	}
	if start.kthreads != nil && (kthreads == nil || *kthreads < 0 || *kthreads > 100) {
		t.Fatalf("kernel threads since a moment ago: %v", kthreads)
	}
}

// TestSharesOfTheMachine: idle and kernel threads as parts of the ticks
// that passed; no kernel-thread share unless both readings have one, and
// none at all when no tick passed.
func TestSharesOfTheMachine(t *testing.T) {
	worker := kthread{pid: 77, start: 88}
	before := machineTimes{total: 1000, idle: 100, kthreads: map[kthread]time.Duration{worker: 2 * time.Second}}
	after := machineTimes{total: 1400, idle: 140, kthreads: map[kthread]time.Duration{worker: 2*time.Second + 240*time.Millisecond}}
	idle, kthreads := before.shares(after)
	if idle == nil || *idle != 10 || kthreads == nil || *kthreads != 6 {
		t.Fatalf("idle %v, kernel threads %v; want 10 and 6 per cent", idle, kthreads)
	}
	hidden := after
	hidden.kthreads = nil
	if idle, kthreads := before.shares(hidden); idle == nil || kthreads != nil {
		t.Fatalf("kernel threads not read: idle %v, kernel threads %v; want 10 and none", idle, kthreads)
	}
	if idle, kthreads := before.shares(before); idle != nil || kthreads != nil {
		t.Fatalf("no tick passed: %v, %v", idle, kthreads)
	}
}

// TestKernelThreadsUsed counts each thread's growth, all of one started
// in between (a pid reused included), and nothing for one that exited:
// never less than nothing.
func TestKernelThreadsUsed(t *testing.T) {
	before := map[kthread]time.Duration{
		{2, 1}:   50 * time.Millisecond,  // kthreadd: grows by 10 ms
		{77, 88}: 900 * time.Millisecond, // exits: its time is not known
		{80, 90}: 300 * time.Millisecond, // exits, and its pid is reused
	}
	after := map[kthread]time.Duration{
		{2, 1}:    60 * time.Millisecond,
		{80, 500}: 20 * time.Millisecond,  // a new worker on an old pid
		{81, 510}: 100 * time.Millisecond, // a new worker
	}
	if got, want := kernelThreadsUsed(before, after), 130*time.Millisecond; got != want {
		t.Fatalf("used %v, want %v", got, want)
	}
}

// TestProcStatFields reads a command name holding spaces and parentheses,
// the parent, the flags and the four CPU times, and refuses lines cut
// short or with a field that is not a number.
func TestProcStatFields(t *testing.T) {
	kworker := "77 (kworker/u8:3-ext4 (rsv) x) I 2 0 0 0 -1 69238880 0 0 0 0 12 34 5 6 20 0 1 0 88 0 0\n"
	p, err := parseProcStat([]byte(kworker))
	if err != nil {
		t.Fatal(err)
	}
	if p.ppid != 2 || p.flags&pfKthread == 0 || p.cpu != 460*time.Millisecond || p.reaped != 110*time.Millisecond || p.start != 88 {
		t.Fatalf("got %+v, want ppid 2, a kernel thread, 460 ms and 110 ms, started at 88", p)
	}
	user := "4242 (taskhoster) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 40 0 0 20 0 9 0 100 0 0\n"
	if p, err := parseProcStat([]byte(user)); err != nil || p.flags&pfKthread != 0 || p.cpu != 2900*time.Millisecond {
		t.Fatalf("a user process: %+v, %v", p, err)
	}
	for _, bad := range []string{"", "1 no name here", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 1 2 0 0",
		"1 (x) S 1 1 1 0 -1 flags 0 0 0 0 1 2 0 0 20 0 1 0 5", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 1 two 0 0 20 0 1 0 5",
		"1 (x) S 1 1 1 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 -5"} {
		if _, err := parseProcStat([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestKernelThreads reads the CPU of the kernel's threads only, past
// entries that are not processes or are gone, and says when it saw none.
func TestKernelThreads(t *testing.T) {
	proc := t.TempDir()
	write := func(name, stat string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(proc, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if stat != "" {
			if err := os.WriteFile(filepath.Join(proc, name, "stat"), []byte(stat), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	write("1", "1 (init) S 0 1 1 0 -1 4194560 0 0 0 0 500 500 0 0 20 0 1 0 1 0 0\n")
	if _, err := kernelThreads(proc); err != errNoKernelThreads {
		t.Fatalf("no kernel thread: %v, want errNoKernelThreads", err)
	}
	write("2", "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 1 2 0 0 20 0 1 0 1 0 0\n")
	write("77", "77 (kworker/u8:3-loop0) I 2 0 0 0 -1 69238880 0 0 0 0 30 70 0 0 20 0 1 0 88 0 0\n")
	write("self", "") // not a process
	write("4243", "") // gone between the listing and the read
	got, err := kernelThreads(proc)
	if err != nil {
		t.Fatal(err)
	}
	want := map[kthread]time.Duration{{2, 1}: 30 * time.Millisecond, {77, 88}: time.Second}
	if len(got) != len(want) || got[kthread{2, 1}] != want[kthread{2, 1}] || got[kthread{77, 88}] != want[kthread{77, 88}] {
		t.Fatalf("kernel threads %v, want %v", got, want)
	}
}
