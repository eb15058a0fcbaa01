package bench

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// What the bench reads of Linux's /proc: a process's CPU time, and where
// the whole machine's went during a run.

// userHZ is the unit of /proc's CPU times: Linux's USER_HZ, 100 a second.
const userHZ = 10 * time.Millisecond

// pfKthread is PF_KTHREAD (include/linux/sched.h) in a process's flags:
// the kernel's own threads (kworkers, jbd2, ksoftirqd, the loop device's).
const pfKthread = 0x00200000

// procInfo is what the bench reads of /proc/<pid>/stat.
type procInfo struct {
	ppid   int
	flags  uint64
	cpu    time.Duration // utime + stime
	reaped time.Duration // cutime + cstime: children that exited and were waited for
	start  uint64        // when it started, in ticks since boot: a pid reused is another process
}

// readProcStat reads <proc>/<pid>/stat (proc is /proc but in tests).
func readProcStat(proc string, pid int) (procInfo, error) {
	data, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "stat"))
	if err != nil {
		return procInfo{}, err
	}
	p, err := parseProcStat(data)
	if err != nil {
		return procInfo{}, fmt.Errorf("%s/%d/stat: %w", proc, pid, err)
	}
	return p, nil
}

// parseProcStat reads the fields after the command name's last closing
// parenthesis (the name may hold spaces and parentheses): state, ppid (the
// line's 4th field), …, flags (9th), …, utime, stime, cutime and cstime
// (14th to 17th), …, starttime (22nd).
func parseProcStat(data []byte) (procInfo, error) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return procInfo{}, fmt.Errorf("no command name in %.100q", data)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 20 {
		return procInfo{}, fmt.Errorf("%d fields after the command name, want 20 or more", len(f))
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return procInfo{}, err
	}
	flags, err := strconv.ParseUint(f[6], 10, 64)
	if err != nil {
		return procInfo{}, err
	}
	var ticks [4]int64
	for j, s := range f[11:15] {
		if ticks[j], err = strconv.ParseInt(s, 10, 64); err != nil {
			return procInfo{}, err
		}
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procInfo{}, err
	}
	return procInfo{
		ppid: ppid, flags: flags, start: start,
		cpu:    time.Duration(ticks[0]+ticks[1]) * userHZ,
		reaped: time.Duration(ticks[2]+ticks[3]) * userHZ,
	}, nil
}

// eachProcess calls visit with every process listed in proc (/proc, or a
// copy of it in tests) whose stat it can read; one gone meanwhile is
// passed by.
func eachProcess(proc string, visit func(pid int, p procInfo)) error {
	entries, err := os.ReadDir(proc)
	if err != nil {
		return err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue // not a process
		}
		if p, err := readProcStat(proc, pid); err == nil {
			visit(pid, p)
		}
	}
	return nil
}

// ProcessCPU is the CPU time (user and system) a process has used so far.
func ProcessCPU(pid int) (time.Duration, error) {
	p, err := readProcStat("/proc", pid)
	return p.cpu, err
}

// errNoKernelThreads: none is visible (a PID namespace hides them).
var errNoKernelThreads = errors.New("no kernel thread in /proc")

// kthread names one kernel thread: its pid, and when it started, since a
// pid may be reused.
type kthread struct {
	pid   int
	start uint64
}

// kernelThreads reads the CPU time each of the kernel's threads has used
// so far from proc (/proc, or a copy of it in tests).
func kernelThreads(proc string) (map[kthread]time.Duration, error) {
	threads := map[kthread]time.Duration{}
	err := eachProcess(proc, func(pid int, p procInfo) {
		if p.flags&pfKthread != 0 {
			threads[kthread{pid, p.start}] = p.cpu
		}
	})
	if err != nil {
		return nil, err
	}
	if len(threads) == 0 {
		return nil, errNoKernelThreads
	}
	return threads, nil
}

// kernelThreadsUsed is the CPU time the kernel's threads used from before
// to after: each one's growth, all of a thread started since. A kworker
// that exited between the two readings took its time in between with it:
// the share is then too low, never negative.
func kernelThreadsUsed(before, after map[kthread]time.Duration) time.Duration {
	var used time.Duration
	for t, cpu := range after {
		used += cpu - before[t]
	}
	return used
}

// machineTimes is the whole machine's CPU time so far, in clock ticks, the
// part of it idle or waiting for I/O, and each kernel thread's: a run
// bound by its disc's flushes rather than by its processors leaves them
// idle, and has kernel workers write and flush for it.
type machineTimes struct {
	total, idle int64
	kthreads    map[kthread]time.Duration // nil: not read
}

// readMachineTimes reads /proc/stat and every kernel thread's stat.
func readMachineTimes() (machineTimes, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineTimes{}, err
	}
	m, err := parseMachineTimes(data)
	if err != nil {
		return machineTimes{}, err
	}
	m.kthreads, _ = kernelThreads("/proc") // nil when none is visible
	return m, nil
}

// parseMachineTimes reads the first line of /proc/stat: "cpu" and then
// user, nice, system, idle, iowait, irq, softirq and steal (the guest
// times after them are already counted in user and nice).
func parseMachineTimes(data []byte) (machineTimes, error) {
	line, _, _ := bytes.Cut(data, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 6 || f[0] != "cpu" {
		return machineTimes{}, fmt.Errorf("/proc/stat: first line %.100q", line)
	}
	var m machineTimes
	for i, s := range f[1:min(len(f), 9)] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return machineTimes{}, fmt.Errorf("/proc/stat: %w", err)
		}
		m.total += v
		if i == 3 || i == 4 {
			m.idle += v
		}
	}
	return m, nil
}

// since returns the shares of the machine's CPU time from m to now, in per
// cent: idle or waiting for I/O, and in the kernel's threads; nil when not
// read.
func (m machineTimes) since() (idle, kthreads *float64) {
	now, err := readMachineTimes()
	if err != nil {
		return nil, nil
	}
	return m.shares(now)
}

// shares is since's arithmetic, from m to later.
func (m machineTimes) shares(later machineTimes) (idle, kthreads *float64) {
	if m.total == 0 || later.total <= m.total {
		return nil, nil
	}
	ticks := float64(later.total - m.total)
	pct := 100 * float64(later.idle-m.idle) / ticks
	idle = &pct
	if m.kthreads != nil && later.kthreads != nil {
		k := 100 * float64(kernelThreadsUsed(m.kthreads, later.kthreads)/userHZ) / ticks
		kthreads = &k
	}
	return idle, kthreads
}
