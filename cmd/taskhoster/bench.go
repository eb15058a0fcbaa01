package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/taskhoster/taskhoster/internal/bench"
)

const benchSynopsis = `bench [flags]

Measures this build (BENCHMARKS.md says how, and what was found). Starts
this binary as "serve" on fresh folders under --dir (one server per run,
on 127.0.0.1 ports the kernel picks, with no TASKHOSTER_* variable of this
shell) and measures, as the median [min–max] of --runs runs: throughput
(P producers post N tasks while W workers finish them, over the socket and
over HTTP, --sync always and none), hand-off latency to an idle worker,
posts alone (P producers post N tasks one per request, then in batches of
--batch-size, no workers: tasks/s and the ratio), claims among many
pending tasks, start-up over many task files, and memory per pending task.
Every throughput run checks that each task was finished exactly once (by
the clients and by the event log); any failure exits 1.

With --url it measures an existing server instead (throughput and hand-off
only; --logs DIR adds the event-log check). With --peers it runs the same
throughput workload, round by round, against Taskhoster (sync always and
none), beanstalkd (-f 0 and without binlog), fsfloor and, with
--database-url, this binary as "serve --store postgres" (one server, then
two sharing the database) and, with --river, River (bench/river, built on
its own) on that database, and prints the ratios. The peers run at P = W
= 32 (unless -p says otherwise), once with one claim in flight per worker
and once with four (-ks), and add batch posts of --batch-size beside
River's InsertMany of as many. --database-dir (the
cluster's data folder) adds the database's CPU per task. --contenders
picks some of them (say, postgres,river).
`

func benchCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("bench", benchSynopsis, stderr)
	d := bench.Defaults()
	var (
		dir        = fs.String("dir", "/var/tmp", "the folder on the disc under test; each run's data goes in a fresh sub-folder, removed afterwards")
		label      = fs.String("label", "", "the disc's name in the report (default: the folder)")
		commit     = fs.String("commit", "", "the source the binary was built from, for the report (default: its VCS stamp, or git HEAD now)")
		binary     = fs.String("binary", "", "the taskhoster binary to serve (default: this one)")
		url        = fs.String("url", "", "measure the server at this URL instead of starting one (comma-separated: several servers of one queue on one database, workers and posts spread over them)")
		host       = fs.String("host", "", "with --url: the Host header (the host folder)")
		token      = fs.String("token", "", "with --url: a token allowed to post and work")
		queue      = fs.String("queue", "bench", "with --url: the queue to use (any item must be valid)")
		logs       = fs.String("logs", "", "with --url: the server's --logs folder, to check its event log")
		n          = fs.Int("n", d.N, "tasks per throughput run")
		p          = fs.String("p", "8,32", "producers of each workload, comma-separated (with --peers: 32 unless given)")
		w          = fs.String("w", "", "workers of each workload, comma-separated (default: as -p)")
		k          = fs.Int("k", d.K, "tasks in flight per worker: open socket claims, or HTTP long-poll loops")
		ks         = fs.String("ks", "", "with --peers: the K values to compare at, comma-separated (default 1,4; as -k when -k is given)")
		runs       = fs.Int("runs", d.Runs, "runs of each measurement (the median is reported)")
		modes      = fs.String("modes", "always,none", "--sync modes of the servers")
		transports = fs.String("transports", "socket,http", "how throughput workers talk to the server")
		sections   = fs.String("sections", strings.Join(bench.AllSections, ","), "what to measure")
		itemBytes  = fs.Int("item-bytes", d.ItemBytes, "approximate size of each task's item")
		handoffs   = fs.Int("handoffs", d.Handoffs, "posts per hand-off run")
		depths     = fs.String("depths", "100,10000,1000000", "pending tasks for the depth and start-up runs")
		claims     = fs.Int("claims", d.Claims, "claims per depth run, with and without a query")
		depthSync  = fs.String("depth-sync", d.DepthSync, "--sync of the depth and start-up servers")
		batchSize  = fs.Int("batch-size", d.Batch, "tasks per batch post in the posts section and, with --peers, of the batch contenders beside River's InsertMany (1 to 1000; 1: none)")
		memory     = fs.Int("memory", d.Memory, "tasks posted for the memory run")
		timeout    = fs.Duration("timeout", d.Timeout, "the longest one run may take")
		jsonOut    = fs.String("json", "", "also write the report as JSON to this file")
		peers      = fs.Bool("peers", false, "compare with beanstalkd and fsfloor instead")
		features   = fs.Bool("features", false, "the bench queue uses retries (maxAttempts 5, a backoff) and every post a priority")
		beanstalkd = fs.String("beanstalkd", "", "with --peers: the beanstalkd binary (empty: skip it)")
		fsfloor    = fs.String("fsfloor", "", "with --peers: the fsfloor binary (empty: skip it)")
		river      = fs.String("river", "", "with --peers: the River peer's binary (bench/river; empty: skip it)")
		dbURL      = fs.String("database-url", "", "with --peers: a PostgreSQL database for Taskhoster's --store postgres runs and River's (their tables are emptied before each run)")
		dbDir      = fs.String("database-dir", "", "with --database-url: the cluster's data folder (its postmaster.pid), to measure the database's CPU")
		contenders = fs.String("contenders", strings.Join(bench.PeerContenders, ","), "with --peers: which of them to run")
		floorModes = fs.String("floor-modes", strings.Join(d.FloorModes, ","), "with --peers: fsfloor modes")
	)
	if err := parse(fs, args); err != nil {
		return flagError(fs, stderr, err)
	}
	if fs.NArg() > 0 {
		return badUsage(fs, stderr, "unexpected argument %q", fs.Arg(0))
	}
	c := d
	c.Dir, c.Label, c.Binary, c.Commit = *dir, *label, *binary, *commit
	if c.Label == "" {
		c.Label = c.Dir
	}
	for _, u := range benchList(*url) {
		t := bench.Target{URL: strings.TrimRight(u, "/"), Host: *host, Token: *token, Queue: *queue}
		if t.Host == "" {
			t.Host = strings.TrimPrefix(strings.TrimPrefix(t.URL, "http://"), "https://")
		}
		c.Existing = append(c.Existing, t)
	}
	c.Logs = *logs
	c.N, c.K, c.Runs, c.ItemBytes = *n, *k, *runs, *itemBytes
	c.Handoffs, c.Claims, c.DepthSync, c.Memory, c.Timeout = *handoffs, *claims, *depthSync, *memory, *timeout
	c.Batch = *batchSize
	c.Peers, c.Beanstalkd, c.Fsfloor, c.Features = *peers, *beanstalkd, *fsfloor, *features
	c.River, c.DatabaseURL, c.DatabaseDir = *river, *dbURL, *dbDir
	c.Contenders = benchList(*contenders)
	c.Syncs, c.Transports, c.Sections, c.FloorModes = benchList(*modes), benchList(*transports), benchList(*sections), benchList(*floorModes)
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	if c.Loads, err = benchPairs(*p, *w); err != nil {
		fmt.Fprintln(stderr, "taskhoster bench:", err)
		return 2
	}
	if c.Peers && !given["p"] && !given["w"] {
		c.Loads = bench.PeerLoads
	}
	switch {
	case *ks != "":
		if c.PeerKs, err = benchInts(*ks); err != nil {
			fmt.Fprintln(stderr, "taskhoster bench: -ks:", err)
			return 2
		}
	case given["k"]:
		c.PeerKs = []int{c.K}
	}
	if c.Depths, err = benchInts(*depths); err != nil {
		fmt.Fprintln(stderr, "taskhoster bench: -depths:", err)
		return 2
	}
	if c.Binary == "" && len(c.Existing) == 0 {
		if c.Binary, err = os.Executable(); err != nil {
			fmt.Fprintln(stderr, "taskhoster bench: cannot find this binary:", err)
			return 1
		}
	}
	c.Progress = stderr
	if err := c.Validate(); err != nil {
		fmt.Fprintln(stderr, "taskhoster bench:", err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, runErr := bench.Run(ctx, c)
	if rep == nil {
		fmt.Fprintln(stderr, "taskhoster bench:", runErr)
		return 1
	}
	if err := rep.Print(stdout); err != nil {
		fmt.Fprintln(stderr, "taskhoster bench:", err)
		return 1
	}
	if *jsonOut != "" {
		data, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(*jsonOut, append(data, '\n'), 0o644); err != nil {
			fmt.Fprintln(stderr, "taskhoster bench:", err)
			return 1
		}
	}
	if runErr != nil {
		fmt.Fprintln(stderr, "taskhoster bench: FAILED:", runErr)
		return 1
	}
	return 0
}

// benchList splits a comma-separated flag, dropping empty entries.
func benchList(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func benchInts(s string) ([]int, error) {
	var out []int
	for _, f := range benchList(s) {
		v, err := strconv.Atoi(strings.ReplaceAll(f, "_", ""))
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// benchPairs zips -p and -w (default: -w as -p) into workloads.
func benchPairs(p, w string) ([]bench.Pair, error) {
	ps, err := benchInts(p)
	if err != nil {
		return nil, fmt.Errorf("-p: %w", err)
	}
	ws := ps
	if w != "" {
		if ws, err = benchInts(w); err != nil {
			return nil, fmt.Errorf("-w: %w", err)
		}
	}
	if len(ps) != len(ws) {
		return nil, fmt.Errorf("-p lists %d workloads, -w %d", len(ps), len(ws))
	}
	out := make([]bench.Pair, len(ps))
	for i := range ps {
		out[i] = bench.Pair{P: ps[i], W: ws[i]}
	}
	return out, nil
}
