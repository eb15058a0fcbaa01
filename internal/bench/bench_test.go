package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // 100..1, unsorted
	}
	tests := []struct {
		name    string
		samples []time.Duration
		p       float64
		want    time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one", ms(7), 99, 7 * time.Millisecond},
		{"median of odd", ms(3, 1, 2), 50, 2 * time.Millisecond},
		{"median of even is the lower middle", ms(4, 1, 3, 2), 50, 2 * time.Millisecond},
		{"p50 of 1..100", ms(hundred...), 50, 50 * time.Millisecond},
		{"p99 of 1..100", ms(hundred...), 99, 99 * time.Millisecond},
		{"p100 is the max", ms(hundred...), 100, 100 * time.Millisecond},
		{"tiny p is the min", ms(hundred...), 0.001, time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percentile(tt.samples, tt.p); got != tt.want {
				t.Errorf("Percentile(%v, %v) = %v, want %v", tt.samples, tt.p, got, tt.want)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	tests := []struct {
		name string
		runs []float64
		want Summary
		str  string
	}{
		{"none", nil, Summary{}, "-"},
		{"one", []float64{5}, Summary{5, 5, 5, []float64{5}}, "5.00"},
		{"odd", []float64{1200, 900, 1500}, Summary{1200, 900, 1500, []float64{1200, 900, 1500}}, "1200 [900–1500]"},
		{"even", []float64{4, 1, 3, 2}, Summary{2.5, 1, 4, []float64{4, 1, 3, 2}}, "2.50 [1.00–4.00]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Summarize(tt.runs)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Summarize (-want +got):\n%s", diff)
			}
			if s := got.String(); s != tt.str {
				t.Errorf("String() = %q, want %q", s, tt.str)
			}
		})
	}
	if r := Ratio(Summary{Median: 3}, Summary{Median: 2}); r != 1.5 {
		t.Errorf("Ratio = %v, want 1.5", r)
	}
	if r := Ratio(Summary{Median: 3}, Summary{}); r != 0 {
		t.Errorf("Ratio over nothing = %v, want 0", r)
	}
}

func TestItemCarriesItsSequence(t *testing.T) {
	for _, size := range []int{10, 200, 1000} {
		it := item(1234, "work", size)
		if size >= 40 && len(it) != size {
			t.Errorf("item of size %d is %d bytes", size, len(it))
		}
		seq, err := seqOf(it)
		if err != nil || seq != 1234 {
			t.Errorf("seqOf(%s) = %d, %v", it, seq, err)
		}
	}
	if _, err := seqOf([]byte(`{"url":"x"}`)); err == nil {
		t.Error("seqOf accepted an item without seq")
	}
}

// TestLedgerCatchesDoubleAndMissing: the check at the end of a run fails
// when a task was accepted twice, or never.
func TestLedgerCatchesDoubleAndMissing(t *testing.T) {
	l := newLedger(3)
	for i := range 3 {
		l.ids[i] = fmt.Sprintf("%016x", i)
	}
	l.accept(0, l.ids[0])
	l.accept(1, l.ids[1])
	if _, err := l.verify(); err == nil || !strings.Contains(err.Error(), "task 2") {
		t.Errorf("verify with a task never finished: %v", err)
	}
	l.accept(1, l.ids[1])
	if _, err := l.verify(); err == nil || !strings.Contains(err.Error(), "finished twice") {
		t.Errorf("verify with a task finished twice: %v", err)
	}
	l = newLedger(1)
	l.ids[0] = "a"
	l.accept(0, "b")
	if _, err := l.verify(); err == nil || !strings.Contains(err.Error(), "finished as b") {
		t.Errorf("verify with the wrong id finished: %v", err)
	}
}

func TestCountResults(t *testing.T) {
	line := func(id, event string) string {
		return fmt.Sprintf(`{"t":1,"at":"x","host":"bench.local","queue":"bench","id":%q,"event":%q}`+"\n", id, event)
	}
	tests := []struct {
		name   string
		log    string
		strict bool
		want   string // part of the error; "" for none
	}{
		{"each once", line("a", "posted") + line("a", "result") + line("b", "result"), true, ""},
		{"twice", line("a", "result") + line("a", "result") + line("b", "result"), true, "task a has 2 result events"},
		{"missing", line("a", "result"), true, "task b has 0 result events"},
		{"stranger, strict", line("a", "result") + line("b", "result") + line("c", "result"), true, "did not post"},
		{"stranger, lenient", line("a", "result") + line("b", "result") + line("c", "result"), false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.MkdirAll(filepath.Join(dir, "tasks"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "tasks", "2026-01-01.jsonl"), []byte(tt.log), 0o644); err != nil {
				t.Fatal(err)
			}
			err := CountResults(dir, "bench", []string{"a", "b"}, tt.strict)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("CountResults: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("CountResults = %v, want an error with %q", err, tt.want)
			}
		})
	}
}

// server is the taskhoster binary, built once for the package's tests
// (without the race detector: it is what is measured, not what is tested).
var server struct {
	once sync.Once
	bin  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if server.bin != "" {
		os.RemoveAll(filepath.Dir(server.bin))
	}
	os.Exit(code)
}

func buildServer(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the server")
	}
	server.once.Do(func() {
		dir, err := os.MkdirTemp("", "bench-test-")
		if err != nil {
			server.err = err
			return
		}
		server.bin = filepath.Join(dir, "taskhoster")
		cmd := exec.Command("go", "build", "-o", server.bin, "../../cmd/taskhoster")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			server.err = fmt.Errorf("build taskhoster: %v\n%s", err, out.String())
		}
	})
	if server.err != nil {
		t.Fatal(server.err)
	}
	return server.bin
}

// TestSmoke runs every section with tiny figures against real servers:
// each run must verify (every task finished exactly once, by the clients
// and by the event log) and the report must print. No figure is judged.
func TestSmoke(t *testing.T) {
	t.Parallel()
	bin := buildServer(t)
	c := Defaults()
	c.Binary, c.Dir, c.Label = bin, t.TempDir(), "test"
	c.Runs, c.N, c.Loads, c.K = 1, 60, []Pair{{2, 3}}, 2
	c.Handoffs, c.Depths, c.Claims, c.Memory, c.Settle = 5, []int{40}, 3, 100, 10*time.Millisecond
	c.Timeout = time.Minute
	var progress bytes.Buffer
	c.Progress = &progress
	rep, err := Run(context.Background(), c)
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
	}
	if got := len(rep.Throughput); got != 4 {
		t.Errorf("%d throughput rows, want 4 (2 transports × 2 sync modes)", got)
	}
	for _, r := range rep.Throughput {
		if r.Failed != 0 || len(r.TPS.Runs) != 1 || r.TPS.Median <= 0 {
			t.Errorf("throughput row %+v", r)
		}
	}
	if len(rep.Handoff) != 2 || len(rep.Depth) != 1 || rep.Memory == nil {
		t.Errorf("report: %d hand-off rows, %d depth rows, memory %v", len(rep.Handoff), len(rep.Depth), rep.Memory)
	}
	var out bytes.Buffer
	if err := rep.Print(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1. Throughput", "2. Hand-off", "3. Depth", "4. Start-up", "5. Memory"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	// Every run removed its folder.
	if left, _ := os.ReadDir(c.Dir); len(left) != 0 {
		t.Errorf("left behind in the bench folder: %v", left)
	}
}

// TestSmokeExisting measures a server the bench did not start, and checks
// its event log through --logs.
func TestSmokeExisting(t *testing.T) {
	t.Parallel()
	bin := buildServer(t)
	f, err := NewFolders(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	s, err := StartServer(bin, f, "none", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Kill()
	c := Defaults()
	c.Existing, c.Logs = []Target{s.Target}, f.Logs
	c.Sections = []string{SectionThroughput, SectionHandoff}
	c.Runs, c.N, c.Loads, c.K, c.Handoffs = 2, 30, []Pair{{2, 2}}, 1, 3
	c.Transports = []string{Socket}
	c.Timeout = time.Minute
	rep, err := Run(context.Background(), c)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(rep.Throughput) != 1 || len(rep.Throughput[0].TPS.Runs) != 2 || len(rep.Handoff) != 1 {
		t.Errorf("report: %+v", rep)
	}
}

// TestSmokePeers runs the peer comparison with beanstalkd, if this machine
// has it (`make bench-peers` installs it).
func TestSmokePeers(t *testing.T) {
	t.Parallel()
	bin := buildServer(t)
	bs, err := exec.LookPath("beanstalkd")
	if err != nil {
		t.Skip("beanstalkd is not installed")
	}
	c := Defaults()
	c.Binary, c.Dir, c.Peers, c.Beanstalkd = bin, t.TempDir(), true, bs
	c.Runs, c.N, c.Loads, c.PeerKs, c.Batch = 1, 50, []Pair{{2, 2}}, []int{1, 2}, 20
	c.Timeout = time.Minute
	rep, err := Run(context.Background(), c)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(rep.Peers) != 2 || rep.Peers[0].K != 1 || rep.Peers[1].K != 2 {
		t.Fatalf("peer rows %+v, want one at K=1 and one at K=2", rep.Peers)
	}
	var out bytes.Buffer
	if err := rep.Print(&out); err != nil {
		t.Fatal(err)
	}
	_, kerr := kernelThreads("/proc")
	kthreadsSeen := kerr == nil
	if !kthreadsSeen {
		t.Logf("kernel threads' share not checked: %v", kerr)
	}
	for _, row := range rep.Peers {
		for _, name := range []string{"taskhoster always", "taskhoster none", "beanstalkd -f0", "beanstalkd nobinlog", "taskhoster always batch 20"} {
			if row.TPS[name].Median <= 0 {
				t.Errorf("K=%d: no figure for %s: %+v", row.K, name, row.TPS)
			}
		}
		// Where each run's time went besides its processes' CPU: the
		// machine's idle share and its kernel threads' (where this machine
		// shows them) for every contender, and the flushes of the file
		// store under --sync always only.
		for name := range row.TPS {
			// /proc/stat counts in clock ticks (10 ms): a run over in
			// less than two may have no share to report (beanstalkd
			// without a binlog finishes these 50 jobs in a few ms).
			if run := time.Duration(float64(row.N) / row.TPS[name].Median * float64(time.Second)); run < 2*userHZ {
				t.Logf("K=%d: %s: over in %v, under two clock ticks: no share to check", row.K, name, run)
				continue
			}
			if idle, ok := row.Idle[name]; !ok || idle.Median < 0 || idle.Median > 100 {
				t.Errorf("K=%d: %s: idle share %+v (present %v)", row.K, name, idle, ok)
			}
			if k, ok := row.KernelThreads[name]; kthreadsSeen && (!ok || k.Median < 0 || k.Median > 100) {
				t.Errorf("K=%d: %s: kernel threads' share %+v (present %v)", row.K, name, k, ok)
			}
		}
		for _, name := range []string{"taskhoster always", "taskhoster always batch 20"} {
			if ms, callers := row.FlushMs[name], row.FlushCallers[name]; ms.Median <= 0 || callers.Median < 1 {
				t.Errorf("K=%d: %s: flushes %+v ms, %+v callers each", row.K, name, ms, callers)
			}
		}
		if ms, ok := row.FlushMs["taskhoster none"]; ok {
			t.Errorf("K=%d: taskhoster none flushed: %+v ms", row.K, ms)
		}
		targets := map[string]float64{}
		for _, r := range row.Ratios {
			targets[r.Name] = r.Target
		}
		for name, want := range map[string]float64{"taskhoster always ÷ taskhoster none": 0.9, "taskhoster always ÷ beanstalkd -f0": 2.0} {
			if got, ok := targets[name]; !ok || got != want {
				t.Errorf("K=%d: ratio %q has target %v (present %v), want %v: %+v", row.K, name, got, ok, want, row.Ratios)
			}
		}
		if !strings.Contains(out.String(), fmt.Sprintf("K = %d (%d in flight)", row.K, 2*row.K)) {
			t.Errorf("report lacks the K=%d table:\n%s", row.K, out.String())
		}
	}
	if strings.Contains(out.String(), fmt.Sprintf("K = %d tasks in flight", c.K)) {
		t.Errorf("a peers-only report names one K in its header, though its tables run at others:\n%s", out.String())
	}
	for _, column := range []string{"machine idle %", "kernel threads %", "flush ms", "callers/flush"} {
		if !strings.Contains(out.String(), column) {
			t.Errorf("report lacks the column %q:\n%s", column, out.String())
		}
	}
	if !strings.Contains(out.String(), "taskhoster always batch 20") {
		t.Errorf("report lacks the batch contender:\n%s", out.String())
	}
}

// TestPosts runs the posts section tiny against real servers (every row
// positive, the ratio taken), then posts one way and the other to one
// server and checks the tasks are there: GET /bench counts them, and the
// first and last id of each kind can be read back.
func TestPosts(t *testing.T) {
	t.Parallel()
	bin := buildServer(t)
	c := Defaults()
	c.Binary, c.Dir, c.Label = bin, t.TempDir(), "test"
	c.Sections = []string{SectionPosts}
	c.Runs, c.N, c.Loads, c.Batch = 1, 200, []Pair{{4, 4}}, 30
	c.Timeout = time.Minute
	rep, err := Run(context.Background(), c)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(rep.Posts) != 2 {
		t.Fatalf("%d posts rows, want 2 (one per sync mode)", len(rep.Posts))
	}
	for _, r := range rep.Posts {
		if r.Failed != 0 || r.Batch != 30 || r.Single.Median <= 0 || r.Batched.Median <= 0 || r.Ratio.Median <= 0 ||
			r.SingleCPU.Median < 0 || r.BatchCPU.Median < 0 || len(r.Ratio.Runs) != 1 {
			t.Errorf("posts row %+v", r)
		}
	}
	var out bytes.Buffer
	if err := rep.Print(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "6. Posts, no workers: one task per request vs batches of 30") {
		t.Errorf("report lacks the posts table:\n%s", out.String())
	}

	f, err := NewFolders(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	s, err := StartServer(bin, f, "always", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Kill()
	ctx := context.Background()
	ld := c.load(Pair{P: 4, W: 1})
	a := newAPI(s.Target)
	defer a.close()
	for i, batch := range []int{1, 30} { // 200 is no multiple of 30: the last batch is short
		r, ids, err := Posts(ctx, s.Target, ld, batch)
		if err != nil || r.TPS <= 0 || len(ids) != c.N {
			t.Fatalf("Posts batch %d: %+v, %d ids, %v", batch, r, len(ids), err)
		}
		counts, err := a.counts(ctx)
		if err != nil || counts["pending"] != (i+1)*c.N {
			t.Errorf("after batch %d: counts %v, %v; want %d pending", batch, counts, err, (i+1)*c.N)
		}
		for _, id := range []string{ids[0], ids[len(ids)-1]} {
			if code, data, err := a.do(ctx, "GET", "/"+benchQueue+"/"+id, nil); err != nil || code != 200 || !strings.Contains(string(data), `"pending"`) {
				t.Errorf("GET task %s: %d %s %v", id, code, data, err)
			}
		}
	}
}

func TestRiverPeerIsOptional(t *testing.T) {
	c := Defaults()
	c.Binary, c.Dir, c.Peers = "taskhoster", t.TempDir(), true
	if err := c.Validate(); err != nil {
		t.Fatalf("peers without River refused: %v", err)
	}
	c.River = "riverbench"
	if err := c.Validate(); err == nil {
		t.Fatal("--river without --database-url accepted")
	}
	c.DatabaseURL = "postgres://db"
	if err := c.Validate(); err != nil {
		t.Fatalf("--river with --database-url refused: %v", err)
	}
	got := strings.Join(riverArgs(c.DatabaseURL, Load{N: 100, P: 2, W: 3, K: 4, ItemBytes: 200, Timeout: time.Minute}), " ")
	want := "-database-url postgres://db -n 100 -p 2 -w 3 -k 4 -item-bytes 200 -fetch-cooldown 1ms -timeout 1m0s"
	if got != want {
		t.Fatalf("river peer's flags:\n got %s\nwant %s", got, want)
	}
	got = strings.Join(riverArgs(c.DatabaseURL, Load{N: 100, P: 2, W: 3, K: 1, ItemBytes: 200, Batch: 100}), " ")
	want = "-database-url postgres://db -n 100 -p 2 -w 3 -k 1 -item-bytes 200 -fetch-cooldown 1ms -batch 100"
	if got != want {
		t.Fatalf("river peer's flags with InsertMany:\n got %s\nwant %s", got, want)
	}
}
