// Package bench is the load generator behind `taskhoster bench`:
// it starts the real server binary on a folder of the disc under test (or
// talks to one already running) and measures throughput, hand-off latency,
// posts alone (one per request and in batches), claims on a deep queue,
// start-up and memory, each as the median of a few
// runs with their range. With Peers it runs the same throughput workload
// against beanstalkd, the fsfloor tool and River (on PostgreSQL),
// interleaved with Taskhoster's runs, at one claim in flight per worker and
// at four, with batch posts beside River's InsertMany, and reports the
// ratios.
//
// Every throughput run is checked: each task posted got exactly one
// accepted result, for the id its post returned, and (when the bench can
// read the server's event log) exactly one "result" event. A run that
// fails the check is reported as a failure, and Run returns an error.
//
// The bench only talks to 127.0.0.1, and every loop in it is bounded by a
// count or a deadline.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Config says what to measure and where.
type Config struct {
	// Binary is the taskhoster binary the bench runs as `serve`.
	Binary string
	// Dir is the folder (on the disc under test) the servers' data goes
	// under, each run in a fresh sub-folder that is removed afterwards.
	Dir string
	// Label names the disc in the report ("own disc", "journaled image").
	Label string
	// Commit names the source the binary was built from; empty: its VCS
	// stamp, or the git commit of the current folder.
	Commit string
	// Existing, if given, are servers the bench does not start (several:
	// of one queue on one database, the workers and posts spread over
	// them): only throughput and hand-off (on the first) are measured, and
	// the event-log check runs only if Logs (one server's --logs folder) is
	// given.
	Existing []Target
	Logs     string

	Sections   []string // of Sections; empty: all
	Runs       int      // runs per figure (the median is reported)
	N          int      // tasks per throughput run
	Loads      []Pair   // producers and workers of each workload
	K          int      // tasks in flight per worker
	Transports []string // Socket, HTTP
	Syncs      []string // "always", "none"
	ItemBytes  int
	Handoffs   int   // posts per hand-off run
	Depths     []int // pending tasks for the depth and start-up runs
	Claims     int   // claims per depth run (and per kind)
	// DepthSync is the depth servers' --sync. "none" by default: the depth
	// runs measure finding a task in the index, not the commit every claim
	// waits for under "always", and the posts between them would otherwise
	// leave flushes running that the claims compete with.
	DepthSync string
	Batch     int           // tasks per batch post in the posts section (1 to 1000)
	Memory    int           // tasks posted for the memory run
	Settle    time.Duration // pause before each memory reading
	Timeout   time.Duration // the longest one run may take

	// Features has the bench queue use SPEC §11: maxAttempts (so every
	// claim is flushed before it is answered), a retry backoff, and a
	// priority on every post. Off: a queue that uses none of it.
	Features bool

	// Peers runs the interleaved comparison instead of Sections.
	Peers      bool
	Beanstalkd string // the beanstalkd binary ("" skips it)
	Fsfloor    string // the fsfloor binary ("" skips it)
	// River is the River peer's binary (bench/river, a module of its own;
	// "" skips it), run against the PostgreSQL database at DatabaseURL.
	River       string
	DatabaseURL string
	// DatabaseDir is the data folder of DatabaseURL's cluster, when it
	// runs on this machine: its postmaster.pid names the processes whose
	// CPU the report counts per task ("" leaves that out).
	DatabaseDir string
	// Contenders limits the peer comparison to these of PeerContenders
	// (empty: all that are given).
	Contenders []string
	// PeerKs are the claims in flight per worker the peer comparison runs
	// at, each in a table of its own (empty: K alone). One open claim is
	// the common worker's shape; four is what Throughput uses.
	PeerKs     []int
	FloorModes []string

	// Progress receives a line per finished run (nil: discarded).
	Progress io.Writer
}

// Sections of a bench run.
const (
	SectionThroughput = "throughput"
	SectionHandoff    = "handoff"
	SectionPosts      = "posts" // single posts vs batch posts, no workers
	SectionMemory     = "memory"
	SectionDepth      = "depth" // depth and start-up
)

// AllSections in the order they run: the depth runs come last because
// creating and deleting a million files slows every later file creation
// on ext4 without a journal.
var AllSections = []string{SectionThroughput, SectionHandoff, SectionPosts, SectionMemory, SectionDepth}

// Defaults are the workload BENCHMARKS.md reports.
func Defaults() Config {
	return Config{
		Runs: 3, N: 20000, Loads: []Pair{{8, 8}, {32, 32}}, K: 4,
		Transports: []string{Socket, HTTP}, Syncs: []string{"always", "none"},
		ItemBytes: 200, Handoffs: 1000, Depths: []int{100, 10_000, 1_000_000},
		Claims: 100, DepthSync: "none", Batch: 100, Memory: 100_000, Settle: time.Second, Timeout: 10 * time.Minute,
		FloorModes: []string{"none", "syncfs2", "wal", "group"},
		PeerKs:     []int{1, 4},
	}
}

// PeerLoads are the workloads of the peer comparison unless -p says
// otherwise: the P = W = 32.
var PeerLoads = []Pair{{32, 32}}

// peerKs are the K values the peer comparison runs at.
func (c Config) peerKs() []int {
	if len(c.PeerKs) == 0 {
		return []int{c.K}
	}
	return c.PeerKs
}

func (c Config) section(s string) bool {
	return len(c.Sections) == 0 || slices.Contains(c.Sections, s)
}

// PeerContenders are the groups of the peer comparison: Taskhoster on the
// file store (--sync always and none), beanstalkd, fsfloor, Taskhoster on
// PostgreSQL (one server and two; needs DatabaseURL) and River (needs
// River and DatabaseURL).
var PeerContenders = []string{"files", "beanstalkd", "fsfloor", "postgres", "river"}

// contends says whether the peer comparison runs group (of PeerContenders).
func (c Config) contends(group string) bool {
	return len(c.Contenders) == 0 || slices.Contains(c.Contenders, group)
}

func (c Config) own() bool { return len(c.Existing) == 0 }

func (c Config) progress(format string, args ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, format+"\n", args...)
	}
}

// Validate checks the configuration before anything runs.
func (c Config) Validate() error {
	switch {
	case c.Runs < 1 || c.N < 1 || c.K < 1 || c.K > 256 || c.ItemBytes < 30:
		return errors.New("runs, n and k must be at least 1 (k at most 256), item bytes at least 30")
	case c.section(SectionPosts) && (c.Batch < 1 || c.Batch > 1000):
		return errors.New("batch size must be 1 to 1000 (the server's limit)")
	case len(c.Loads) == 0:
		return errors.New("no workload (p, w) given")
	case c.own() && (c.Binary == "" || c.Dir == ""):
		return errors.New("a server the bench starts needs the binary and a folder")
	case c.Peers && !c.own():
		return errors.New("the peer comparison starts its own servers: no --url")
	case c.River != "" && c.DatabaseURL == "":
		return errors.New("--river needs --database-url")
	}
	for _, k := range c.PeerKs {
		if k < 1 || k > 256 {
			return fmt.Errorf("peer K %d: want 1 to 256", k)
		}
	}
	if c.Peers && (c.Batch < 1 || c.Batch > 1000) {
		return errors.New("batch size must be 1 to 1000 (the server's limit)")
	}
	for _, name := range c.Contenders {
		if !slices.Contains(PeerContenders, name) {
			return fmt.Errorf("contender %q: want one of %s", name, strings.Join(PeerContenders, ", "))
		}
	}
	for _, l := range c.Loads {
		if l.P < 1 || l.W < 1 {
			return fmt.Errorf("workload %s: producers and workers must be at least 1", l)
		}
	}
	for _, s := range c.Syncs {
		if s != "always" && s != "none" {
			return fmt.Errorf("sync mode %q: want always or none", s)
		}
	}
	for _, t := range c.Transports {
		if t != Socket && t != HTTP {
			return fmt.Errorf("transport %q: want socket or http", t)
		}
	}
	for _, s := range c.Sections {
		if !slices.Contains(AllSections, s) {
			return fmt.Errorf("section %q: want one of %s", s, strings.Join(AllSections, ", "))
		}
	}
	return nil
}

// Run measures what c asks for and returns the report. The error says
// which runs failed (a verification or a server that would not start);
// the report still holds every figure that was measured.
func Run(ctx context.Context, c Config) (*Report, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	rep := newReport(c)
	defer rep.finish()
	if c.Peers {
		rep.Peers = runPeers(ctx, c, rep)
		return rep, rep.err()
	}
	if c.section(SectionThroughput) {
		rep.Throughput = runThroughput(ctx, c, rep)
	}
	if c.section(SectionHandoff) {
		rep.Handoff = runHandoff(ctx, c, rep)
	}
	if c.own() {
		if c.section(SectionPosts) {
			rep.Posts = runPosts(ctx, c, rep)
		}
		if c.section(SectionMemory) && c.Memory > 0 {
			rep.Memory = runMemory(ctx, c, rep)
		}
		if c.section(SectionDepth) {
			rep.Depth = runDepth(ctx, c, rep)
		}
	} else if c.section(SectionPosts) || c.section(SectionMemory) || c.section(SectionDepth) {
		// Posts without workers would leave 2 N tasks pending on it.
		rep.Notes = append(rep.Notes, "posts, memory, depth and start-up need a server the bench starts: skipped with --url")
	}
	if ctx.Err() != nil {
		rep.fail("bench", fmt.Errorf("interrupted: %w", ctx.Err()))
	}
	return rep, rep.err()
}

// withServer starts a server on fresh folders with sync, runs fn, stops
// the server, runs after (if not nil) on the folders the stopped server
// left, and removes them. prepare, if not nil, fills the folders before
// the server starts.
func withServer(c Config, sync string, prepare func(Folders) error, fn func(*Server) error, after func(Folders) error) error {
	f, err := NewFolders(c.Dir, c.Features)
	if err != nil {
		return err
	}
	defer f.Remove()
	if prepare != nil {
		if err := prepare(f); err != nil {
			return err
		}
	}
	s, err := StartServer(c.Binary, f, sync, c.Timeout)
	if err != nil {
		return err
	}
	err = fn(s)
	if stopErr := s.Stop(); err == nil {
		err = stopErr
	}
	if err == nil && after != nil {
		err = after(f)
	}
	return err
}

// throughputOnce is one verified throughput run against a server started
// for it (or the existing one). After the run, the server's event log must
// hold exactly one "result" event per task; it is read once the server has
// stopped, which flushes it.
func throughputOnce(ctx context.Context, c Config, transport, sync string, ld Load) (LoadRun, error) {
	if !c.own() {
		r, ids, err := ThroughputOn(ctx, c.Existing, transport, ld)
		if err == nil && c.Logs != "" {
			err = CountResults(c.Logs, c.Existing[0].Queue, ids, false)
		}
		return r, err
	}
	var r LoadRun
	var ids []string
	err := withServer(c, sync, nil, func(s *Server) error {
		var err error
		cpu := startCPU(s.Pid())
		before, ferr := readFlushes(ctx, s.Admin)
		r, ids, err = Throughput(ctx, s.Target, transport, ld)
		r.ServerCPU, r.ClientCPU = cpu.perTask(ld.N)
		if after, aerr := readFlushes(ctx, s.Admin); ferr == nil && aerr == nil {
			r.FlushMs, r.FlushCallers = before.since(after)
		}
		return err
	}, func(f Folders) error {
		return CountResults(f.Logs, benchQueue, ids, true)
	})
	return r, err
}

// Pair is a workload's number of producers and workers.
type Pair struct{ P, W int }

func (p Pair) String() string {
	if p.P == p.W {
		return fmt.Sprintf("P=W=%d", p.P)
	}
	return fmt.Sprintf("P=%d W=%d", p.P, p.W)
}

func (c Config) load(p Pair) Load {
	return Load{N: c.N, P: p.P, W: p.W, K: c.K, ItemBytes: c.ItemBytes, Timeout: c.Timeout}
}
