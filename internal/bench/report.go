package bench

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is everything one bench invocation measured.
type Report struct {
	Started   time.Time `json:"started"`
	Machine   Machine   `json:"machine"`
	Label     string    `json:"label"`
	Dir       string    `json:"dir"`
	Commit    string    `json:"commit"`
	N         int       `json:"n"`
	K         int       `json:"k"`
	Runs      int       `json:"runs"`
	ItemBytes int       `json:"item_bytes"`
	Features  bool      `json:"features,omitempty"` // the queue used SPEC §11 (Config.Features)

	Throughput []ThroughputRow `json:"throughput,omitempty"`
	Handoff    []HandoffRow    `json:"handoff,omitempty"`
	Posts      []PostsRow      `json:"posts,omitempty"`
	Memory     *MemoryRow      `json:"memory,omitempty"`
	Depth      []DepthRow      `json:"depth,omitempty"`
	Peers      []PeerRow       `json:"peers,omitempty"`

	Failures []string `json:"failures,omitempty"`
	Notes    []string `json:"notes,omitempty"`
}

// Machine describes where the figures come from.
type Machine struct {
	CPUs   int    `json:"cpus"`
	RAM    string `json:"ram"`
	Kernel string `json:"kernel"`
	// Disc is the filesystem holding Dir: device, type, and whether it has
	// a journal.
	Disc string `json:"disc"`
	// LoadBefore and LoadAfter are /proc/loadavg when the bench began and
	// ended: other work on the machine shows up in every figure.
	LoadBefore string `json:"load_before"`
	LoadAfter  string `json:"load_after"`
}

// loadavg is the 1, 5 and 15 minute load averages.
func loadavg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// ThroughputRow is one workload's throughput over the runs. Rates are per
// second, latencies milliseconds.
type ThroughputRow struct {
	Transport string `json:"transport"`
	Sync      string `json:"sync"`
	P, W, K   int
	N         int     `json:"n"`
	TPS       Summary `json:"tps"`
	PostTPS   Summary `json:"post_tps"`
	LatP50    Summary `json:"lat_p50_ms"`
	LatP99    Summary `json:"lat_p99_ms"`
	PostP50   Summary `json:"post_p50_ms"`
	DelivP50  Summary `json:"deliver_p50_ms"`
	ResultP50 Summary `json:"result_p50_ms"`
	ServerCPU Summary `json:"server_cpu_ms_per_task"`
	ClientCPU Summary `json:"client_cpu_ms_per_task"`
	Failed    int     `json:"failed_runs"`
}

// HandoffRow is the hand-off latency over the runs (ms).
type HandoffRow struct {
	Sync       string  `json:"sync"`
	N          int     `json:"n"`
	DeliverP50 Summary `json:"deliver_p50_ms"`
	DeliverP99 Summary `json:"deliver_p99_ms"`
	PostP50    Summary `json:"post_p50_ms"`
	PostP99    Summary `json:"post_p99_ms"`
}

// PostsRow is one producer count and sync mode of the posts section:
// tasks posted per second with no workers, one task per request (Single)
// and Batch per batch post (Batched), with the server's CPU ms per task.
// Ratio is Batched ÷ Single, taken within each round.
type PostsRow struct {
	Sync      string  `json:"sync"`
	P         int     `json:"p"`
	N         int     `json:"n"`
	Batch     int     `json:"batch"`
	Single    Summary `json:"single_tps"`
	Batched   Summary `json:"batch_tps"`
	Ratio     Summary `json:"batch_over_single"`
	SingleCPU Summary `json:"single_server_cpu_ms_per_task"`
	BatchCPU  Summary `json:"batch_server_cpu_ms_per_task"`
	Failed    int     `json:"failed_runs"`
}

// MemoryRow is the memory per 100 000 pending tasks, posted over HTTP.
type MemoryRow struct {
	Tasks      int     `json:"tasks"`
	ItemBytes  int     `json:"item_bytes"`
	RSSBefore  Summary `json:"rss_before_mib"`
	RSSPer100k Summary `json:"rss_per_100k_mib"`
	// Beyond is the RSS per task minus the item's bytes (the target's
	// "index overhead beyond the item bytes it keeps").
	Beyond      Summary `json:"rss_per_task_beyond_item_bytes"`
	HeapPer100k Summary `json:"heap_per_100k_mib"`
}

// DepthRow is one queue depth: start-up over that many task files, the
// memory they take, and claims among them (ms).
type DepthRow struct {
	Pending      int     `json:"pending"`
	Startup      Summary `json:"startup_s"`
	FilesPerSec  Summary `json:"startup_files_per_s"`
	RSSAfter     Summary `json:"rss_after_startup_mib"`
	NoMatchFirst Summary `json:"nomatch_first_ms"`
	NoMatchP50   Summary `json:"nomatch_p50_ms"`
	NoMatchP99   Summary `json:"nomatch_p99_ms"`
	AnyP50       Summary `json:"any_p50_ms"`
	AnyP99       Summary `json:"any_p99_ms"`
}

// PeerRow is one P = W workload run against every peer, in rounds.
type PeerRow struct {
	P, W, K int
	N       int `json:"n"`
	// Completed tasks per second of each contender: "taskhoster always",
	// "taskhoster none", "beanstalkd -f0", "beanstalkd nobinlog",
	// "river" (on PostgreSQL), "fsfloor MODE", and with batches of B
	// "taskhoster always batch B" and "river InsertMany B".
	TPS map[string]Summary `json:"tps"`
	// Lat is post → finished p50 (ms), for the servers.
	Lat map[string]Summary `json:"lat_p50_ms"`
	// CPU is the server process's CPU milliseconds per task (the two
	// servers' together for "taskhoster postgres 2 servers"; River's whole
	// process, its producers too, for "river").
	CPU map[string]Summary `json:"server_cpu_ms_per_task"`
	// DBCPU is the PostgreSQL cluster's CPU milliseconds per task (its
	// postmaster and every child), for the runs on the database.
	DBCPU map[string]Summary `json:"db_cpu_ms_per_task,omitempty"`
	// Idle and KernelThreads are the shares of the machine's CPU time idle
	// or waiting for I/O, and used by the kernel's threads, during each
	// run, in per cent (LoadRun's); FlushMs and FlushCallers are a
	// file-store server's mean group commit and the callers each served,
	// under --sync always.
	Idle          map[string]Summary `json:"machine_idle_pct,omitempty"`
	KernelThreads map[string]Summary `json:"kernel_threads_pct,omitempty"`
	FlushMs       map[string]Summary `json:"flush_ms,omitempty"`
	FlushCallers  map[string]Summary `json:"flush_callers,omitempty"`
	// Ratios of completed tasks per second, each taken within a round and
	// then summarised over the rounds.
	Ratios []PeerRatio `json:"ratios"`
}

// PeerRatio is one named ratio, with the target BENCHMARKS.md sets for it
// (0: none).
type PeerRatio struct {
	Name   string  `json:"name"`
	Ratio  Summary `json:"ratio"`
	Target float64 `json:"target,omitempty"`
}

func newReport(c Config) *Report {
	if c.Commit == "" {
		c.Commit = commit()
	}
	return &Report{
		Started: time.Now().UTC(), Machine: machine(c.Dir), Label: c.Label, Dir: c.Dir,
		Commit: c.Commit, N: c.N, K: c.K, Runs: c.Runs, ItemBytes: c.ItemBytes, Features: c.Features,
	}
}

func (r *Report) fail(what string, err error) {
	r.Failures = append(r.Failures, fmt.Sprintf("%s: %v", what, err))
}

func (r *Report) finish() {
	r.Machine.LoadAfter = loadavg()
}

func (r *Report) err() error {
	if len(r.Failures) == 0 {
		return nil
	}
	return fmt.Errorf("%d failed: %s", len(r.Failures), strings.Join(r.Failures, "; "))
}

// machine describes this machine and the filesystem holding dir.
func machine(dir string) Machine {
	m := Machine{CPUs: runtime.NumCPU(), LoadBefore: loadavg()}
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(data))
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.Lines(string(data)) {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				var kb int64
				fmt.Sscan(rest, &kb)
				m.RAM = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
			}
		}
	}
	if dir != "" {
		m.Disc = disc(dir)
	}
	return m
}

// disc says which filesystem dir is on, and whether it has a journal
// (ext4 registers one under /proc/fs/jbd2/<device>-8).
func disc(dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			dir = d
			break
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	out, err := exec.Command("findmnt", "-n", "-o", "SOURCE,FSTYPE,OPTIONS", "-T", dir).Output()
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(out))
	if len(f) < 2 {
		return strings.TrimSpace(string(out))
	}
	desc := f[0] + " " + f[1]
	if f[1] == "ext4" {
		dev := filepath.Base(f[0])
		if matches, _ := filepath.Glob("/proc/fs/jbd2/" + dev + "-*"); len(matches) > 0 {
			desc += " with a journal"
		} else {
			desc += " without a journal"
		}
	}
	if f[1] == "tmpfs" {
		desc += " (memory, not a disc!)"
	}
	return desc
}

// commit says which source the binary was built from: its VCS stamp, if
// the build kept one, else the git commit of the current folder now
// ("+dirty" with uncommitted changes), which is only right if nobody
// committed since the build: pass Config.Commit to be sure.
func commit() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		var rev, dirty string
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "+dirty"
				}
			}
		}
		if rev != "" {
			return rev[:min(12, len(rev))] + dirty
		}
	}
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		c += "+dirty"
	}
	return c
}

// Print writes the report as readable tables.
func (r *Report) Print(w io.Writer) error {
	ew := &errWriter{w: w}
	p := func(format string, args ...any) { fmt.Fprintf(ew, format, args...) }
	p("taskhoster bench — %s\n", r.Started.Format(time.RFC3339))
	p("machine: %d CPUs, %s RAM, kernel %s; load average %s at the start, %s at the end\n",
		r.Machine.CPUs, r.Machine.RAM, r.Machine.Kernel, r.Machine.LoadBefore, r.Machine.LoadAfter)
	if r.Dir != "" {
		p("disc:    %s: %s (%s)\n", r.Label, r.Dir, r.Machine.Disc)
	}
	p("commit:  %s\n", r.Commit)
	// A peers-only report runs at the Ks its tables name, not at K.
	inFlight := fmt.Sprintf("K = %d tasks in flight per worker", r.K)
	if len(r.Throughput) == 0 && len(r.Peers) > 0 {
		inFlight = "K tasks in flight per worker as each table says"
	}
	p("figures: median [min–max] of %d runs; ~%d-byte items; %s\n", r.Runs, r.ItemBytes, inFlight)
	if r.Features {
		p("queue:   maxAttempts 5 (every claim flushed), retry backoff, a priority on every post\n")
	}

	table := func(title string, header string, rows [][]string) {
		if len(rows) == 0 {
			return
		}
		p("\n%s\n", title)
		tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, header)
		for _, row := range rows {
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
		tw.Flush()
	}

	var rows [][]string
	for _, t := range r.Throughput {
		rows = append(rows, []string{t.Transport, t.Sync, fmt.Sprintf("%d/%d", t.P, t.W), fmt.Sprint(t.N),
			t.TPS.String(), t.PostTPS.String(), t.LatP50.String(), t.LatP99.String(),
			t.PostP50.String(), t.DelivP50.String(), t.ResultP50.String(), t.ServerCPU.String(), t.ClientCPU.String(), failed(t.Failed)})
	}
	table("1. Throughput (completed tasks/s; latencies in ms; CPU in ms per task)",
		"workers\tsync\tP/W\tN\tdone/s\tpost/s\tlat p50\tlat p99\tpost p50\tpost→task p50\tresult p50\tserver CPU\tclient CPU\tcheck", rows)

	rows = nil
	for _, h := range r.Handoff {
		rows = append(rows, []string{h.Sync, fmt.Sprint(h.N), h.DeliverP50.String(), h.DeliverP99.String(), h.PostP50.String(), h.PostP99.String()})
	}
	table("2. Hand-off to an idle socket worker (post sent → task arrived, ms)",
		"sync\tposts\tp50\tp99\tpost 201 p50\tpost 201 p99", rows)

	rows = nil
	for _, d := range r.Depth {
		rows = append(rows, []string{fmt.Sprint(d.Pending), d.NoMatchFirst.String(), d.NoMatchP50.String(), d.NoMatchP99.String(), d.AnyP50.String(), d.AnyP99.String()})
	}
	table("3. Depth: socket claim (claim sent → task arrived, ms) with N pending",
		"pending\tno match: first\tno match p50\tno match p99\tany p50\tany p99", rows)
	if len(r.Depth) > 1 {
		first, last := r.Depth[0], r.Depth[len(r.Depth)-1]
		p("   p50 at %d ÷ p50 at %d: no match %s, any %s (target ≤ 1.3)\n", last.Pending, first.Pending,
			num(Ratio(last.NoMatchP50, first.NoMatchP50)), num(Ratio(last.AnyP50, first.AnyP50)))
	}

	rows = nil
	for _, d := range r.Depth {
		rows = append(rows, []string{fmt.Sprint(d.Pending), d.Startup.String(), d.FilesPerSec.String(), d.RSSAfter.String()})
	}
	table("4. Start-up (exec → listening) over N task files, page cache warm",
		"files\tseconds\tfiles/s\tRSS after, MiB", rows)

	if m := r.Memory; m != nil {
		table(fmt.Sprintf("5. Memory: %d tasks posted to an empty queue (RSS from /proc, heap from go_memstats_alloc_bytes)", m.Tasks),
			"RSS before, MiB\tRSS per 100k, MiB\tRSS per task beyond its item, bytes\theap per 100k, MiB",
			[][]string{{m.RSSBefore.String(), m.RSSPer100k.String(), m.Beyond.String(), m.HeapPer100k.String()}})
	}

	rows = nil
	for _, b := range r.Posts {
		rows = append(rows, []string{b.Sync, fmt.Sprint(b.P), fmt.Sprint(b.N), b.Single.String(), b.Batched.String(), b.Ratio.String(),
			b.SingleCPU.String(), b.BatchCPU.String(), failed(b.Failed)})
	}
	if len(r.Posts) > 0 {
		batch := r.Posts[0].Batch
		table(fmt.Sprintf("6. Posts, no workers: one task per request vs batches of %d (tasks posted/s; server CPU ms per task)", batch),
			"sync\tP\tN\tsingle/s\tbatch/s\tbatch ÷ single\tserver CPU single\tserver CPU batch\tcheck", rows)
	}

	for _, pr := range r.Peers {
		rows = nil
		for _, name := range peerOrder(pr.TPS) {
			cell := func(m map[string]Summary) string {
				if v, ok := m[name]; ok {
					return v.String()
				}
				return "-"
			}
			rows = append(rows, []string{name, pr.TPS[name].String(), cell(pr.Lat), cell(pr.CPU), cell(pr.DBCPU),
				cell(pr.Idle), cell(pr.KernelThreads), cell(pr.FlushMs), cell(pr.FlushCallers)})
		}
		table(fmt.Sprintf("Peers, P = %d, W = %d, K = %d (%d in flight), N = %d: completed tasks/s", pr.P, pr.W, pr.K, pr.W*pr.K, pr.N),
			"contender\tdone/s\tlat p50 ms\tserver CPU ms/task\tdatabase CPU ms/task\tmachine idle %\tkernel threads %\tflush ms\tcallers/flush", rows)
		rows = nil
		for _, ra := range pr.Ratios {
			target := ""
			if ra.Target > 0 {
				verdict := "below"
				if ra.Ratio.Median >= ra.Target {
					verdict = "met"
				}
				target = fmt.Sprintf("≥ %s (%s)", num(ra.Target), verdict)
			}
			rows = append(rows, []string{ra.Name, ra.Ratio.String(), target})
		}
		table("Ratios (each taken within a round, then median [min–max] over rounds)", "ratio\tvalue\ttarget", rows)
	}

	for _, n := range r.Notes {
		p("\nnote: %s\n", n)
	}
	if len(r.Failures) > 0 {
		p("\nFAILED:\n")
		for _, f := range r.Failures {
			p("  %s\n", f)
		}
	}
	return ew.err
}

func failed(n int) string {
	if n == 0 {
		return "ok"
	}
	return fmt.Sprintf("%d FAILED", n)
}

// peerOrder lists the contenders: Taskhoster and beanstalkd first, then
// the batch posts, then the floors.
func peerOrder(m map[string]Summary) []string {
	var out []string
	for _, name := range []string{"taskhoster always", "beanstalkd -f0", PGOneName, PGTwoName, RiverName, "taskhoster none", "beanstalkd nobinlog"} {
		if _, ok := m[name]; ok {
			out = append(out, name)
		}
	}
	// The batch contenders, Taskhoster's beside River's, of any size.
	var batches []string
	for name := range m {
		if strings.HasPrefix(name, "taskhoster always batch ") || strings.HasPrefix(name, "river InsertMany ") {
			batches = append(batches, name)
		}
	}
	sort.Strings(batches)
	out = append(out, batches...)
	for _, mode := range []string{"none", "fsync", "group", "syncfs", "syncfs2", "wal", "walpre"} {
		if _, ok := m["fsfloor "+mode]; ok {
			out = append(out, "fsfloor "+mode)
		}
	}
	return out
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(b []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(b)
	if err != nil {
		e.err = errors.Join(e.err, err)
	}
	return n, err
}
