package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// runThroughput runs every (P = W, sync, transport) workload Runs times,
// round by round, so that a slow spell of the machine spreads over all of
// them instead of spoiling one.
func runThroughput(ctx context.Context, c Config, rep *Report) []ThroughputRow {
	type key struct {
		p        Pair
		sync, tr string
	}
	var keys []key
	for _, p := range c.Loads {
		for _, s := range c.Syncs {
			if !c.own() && s != c.Syncs[0] {
				continue // an existing server has one sync mode
			}
			for _, tr := range c.Transports {
				keys = append(keys, key{p, s, tr})
			}
		}
	}
	runs := make(map[key][]LoadRun)
	failures := make(map[key]int)
rounds:
	for round := 1; round <= c.Runs; round++ {
		for _, k := range keys {
			if ctx.Err() != nil {
				break rounds
			}
			r, err := throughputOnce(ctx, c, k.tr, k.sync, c.load(k.p))
			name := fmt.Sprintf("throughput %s sync=%s %s K=%d N=%d run %d", k.tr, k.sync, k.p, c.K, c.N, round)
			if err != nil {
				failures[k]++
				rep.fail(name, err)
				c.progress("%s: FAILED: %v", name, err)
				continue
			}
			runs[k] = append(runs[k], r)
			c.progress("%s: %.0f done/s, post→accepted p50 %.1f ms p99 %.1f ms, CPU ms/task server %.2f clients %.2f; every task finished once",
				name, r.TPS, r.LatP50, r.LatP99, r.ServerCPU, r.ClientCPU)
		}
	}
	var rows []ThroughputRow
	for _, k := range keys {
		rs := runs[k]
		pick := func(f func(LoadRun) float64) Summary {
			var v []float64
			for _, r := range rs {
				v = append(v, f(r))
			}
			return Summarize(v)
		}
		sync := k.sync
		if !c.own() {
			sync = "(server's)"
		}
		rows = append(rows, ThroughputRow{
			Transport: k.tr, Sync: sync, P: k.p.P, W: k.p.W, K: c.K, N: c.N,
			TPS:       pick(func(r LoadRun) float64 { return r.TPS }),
			PostTPS:   pick(func(r LoadRun) float64 { return r.PostTPS }),
			LatP50:    pick(func(r LoadRun) float64 { return r.LatP50 }),
			LatP99:    pick(func(r LoadRun) float64 { return r.LatP99 }),
			PostP50:   pick(func(r LoadRun) float64 { return r.PostP50 }),
			DelivP50:  pick(func(r LoadRun) float64 { return r.DeliverP50 }),
			ResultP50: pick(func(r LoadRun) float64 { return r.ResultP50 }),
			ServerCPU: pick(func(r LoadRun) float64 { return r.ServerCPU }),
			ClientCPU: pick(func(r LoadRun) float64 { return r.ClientCPU }),
			Failed:    failures[k],
		})
	}
	return rows
}

func runHandoff(ctx context.Context, c Config, rep *Report) []HandoffRow {
	if c.Handoffs < 1 {
		return nil
	}
	var rows []HandoffRow
	for _, sync := range c.Syncs {
		var d50, d99, p50, p99 []float64
		for round := 1; round <= c.Runs && ctx.Err() == nil; round++ {
			var r HandoffRun
			var err error
			if c.own() {
				err = withServer(c, sync, nil, func(s *Server) error {
					r, err = Handoff(ctx, s.Target, c.Handoffs, c.ItemBytes)
					return err
				}, nil)
			} else {
				r, err = Handoff(ctx, c.Existing[0], c.Handoffs, c.ItemBytes)
			}
			name := fmt.Sprintf("hand-off sync=%s run %d", sync, round)
			if err != nil {
				rep.fail(name, err)
				c.progress("%s: FAILED: %v", name, err)
				continue
			}
			d50, d99, p50, p99 = append(d50, r.DeliverP50), append(d99, r.DeliverP99), append(p50, r.PostP50), append(p99, r.PostP99)
			c.progress("%s: post → task p50 %.2f ms p99 %.2f ms", name, r.DeliverP50, r.DeliverP99)
		}
		if !c.own() {
			sync = "(server's)"
		}
		rows = append(rows, HandoffRow{Sync: sync, N: c.Handoffs,
			DeliverP50: Summarize(d50), DeliverP99: Summarize(d99), PostP50: Summarize(p50), PostP99: Summarize(p99)})
		if !c.own() {
			break
		}
	}
	return rows
}

func runMemory(ctx context.Context, c Config, rep *Report) *MemoryRow {
	var before, per100k, beyond, heap []float64
	const mib = 1 << 20
	for round := 1; round <= c.Runs && ctx.Err() == nil; round++ {
		var m MemoryRun
		err := withServer(c, "none", nil, func(s *Server) error {
			var err error
			m, err = Memory(ctx, s, c.Memory, 16, c.ItemBytes, c.Settle)
			return err
		}, nil)
		name := fmt.Sprintf("memory %d tasks run %d", c.Memory, round)
		if err != nil {
			rep.fail(name, err)
			c.progress("%s: FAILED: %v", name, err)
			continue
		}
		before = append(before, float64(m.RSSBefore)/mib)
		per100k = append(per100k, m.RSSPerTask*100_000/mib)
		beyond = append(beyond, m.RSSPerTask-float64(c.ItemBytes))
		heap = append(heap, m.HeapPerTask*100_000/mib)
		c.progress("%s: RSS %.1f → %.1f MiB, %.0f bytes per task", name, float64(m.RSSBefore)/mib, float64(m.RSSAfter)/mib, m.RSSPerTask)
	}
	return &MemoryRow{Tasks: c.Memory, ItemBytes: c.ItemBytes,
		RSSBefore: Summarize(before), RSSPer100k: Summarize(per100k), Beyond: Summarize(beyond), HeapPer100k: Summarize(heap)}
}

// runDepth writes each depth's task files once, then starts a server on
// them Runs times: each start is a start-up sample, and the claims on it
// a depth sample. The folder is removed after the depth's last run.
func runDepth(ctx context.Context, c Config, rep *Report) []DepthRow {
	var rows []DepthRow
	for _, n := range c.Depths {
		if ctx.Err() != nil {
			break
		}
		if ok, why := room(c.Dir, n); !ok {
			rep.Notes = append(rep.Notes, fmt.Sprintf("depth %d skipped: %s", n, why))
			continue
		}
		f, err := NewFolders(c.Dir, c.Features)
		if err != nil {
			rep.fail("depth", err)
			continue
		}
		c.progress("depth %d: writing the task files", n)
		if err := Prefill(ctx, f, n, c.ItemBytes); err != nil {
			rep.fail(fmt.Sprintf("depth %d: prefill", n), err)
			f.Remove()
			continue
		}
		var row DepthRow
		row.Pending = n
		var startup, fps, rss, first, nm50, nm99, a50, a99 []float64
		for round := 1; round <= c.Runs && ctx.Err() == nil; round++ {
			name := fmt.Sprintf("depth %d run %d", n, round)
			s, err := StartServer(c.Binary, f, c.DepthSync, c.Timeout)
			if err != nil {
				rep.fail(name, err)
				c.progress("%s: FAILED: %v", name, err)
				continue
			}
			startup = append(startup, s.Startup.Seconds())
			fps = append(fps, float64(n)/s.Startup.Seconds())
			if b, err := RSS(s.Pid()); err == nil {
				rss = append(rss, float64(b)/(1<<20))
			}
			d, err := Depth(ctx, s.Target, n, c.Claims, c.ItemBytes, c.Timeout)
			if stopErr := s.Stop(); err == nil {
				err = stopErr
			}
			if err != nil {
				rep.fail(name, err)
				c.progress("%s: FAILED: %v", name, err)
				continue
			}
			first, nm50, nm99 = append(first, d.NoMatchFirst), append(nm50, d.NoMatchP50), append(nm99, d.NoMatchP99)
			a50, a99 = append(a50, d.AnyP50), append(a99, d.AnyP99)
			c.progress("%s: start-up %.2f s (%.0f files/s); claim no-match p50 %.2f ms, any p50 %.2f ms",
				name, s.Startup.Seconds(), float64(n)/s.Startup.Seconds(), d.NoMatchP50, d.AnyP50)
		}
		c.progress("depth %d: removing the task files", n)
		if err := f.Remove(); err != nil {
			rep.fail(fmt.Sprintf("depth %d: remove", n), err)
		}
		row.Startup, row.FilesPerSec, row.RSSAfter = Summarize(startup), Summarize(fps), Summarize(rss)
		row.NoMatchFirst, row.NoMatchP50, row.NoMatchP99 = Summarize(first), Summarize(nm50), Summarize(nm99)
		row.AnyP50, row.AnyP99 = Summarize(a50), Summarize(a99)
		rows = append(rows, row)
	}
	return rows
}

// room says whether dir's filesystem has the inodes and blocks for n task
// files (one 4 KiB block each, with a margin).
func room(dir string, n int) (bool, string) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return true, "" // let the prefill say what is wrong
	}
	freeBytes := st.Bavail * uint64(st.Bsize)
	needBytes := uint64(n) * 4096 * 5 / 4
	if st.Ffree < uint64(n)*5/4 || freeBytes < needBytes {
		return false, fmt.Sprintf("%s has %d free inodes and %d MiB free; %d task files need about %d and %d MiB",
			dir, st.Ffree, freeBytes>>20, n, n*5/4, needBytes>>20)
	}
	return true, ""
}

// Names of the batch contenders: producers post Config.Batch tasks per
// request (Taskhoster's POST /{queue}/batch, River's InsertManyTx) while
// the workers finish them.
func batchName(batch int) string      { return fmt.Sprintf("taskhoster always batch %d", batch) }
func riverBatchName(batch int) string { return fmt.Sprintf("river InsertMany %d", batch) }

// runPeers runs the comparison at each of PeerKs (K claims in flight per
// worker), for each P = W.
func runPeers(ctx context.Context, c Config, rep *Report) []PeerRow {
	var rows []PeerRow
	for _, k := range c.peerKs() {
		ck := c
		ck.K = k
		rows = append(rows, runPeersAt(ctx, ck, rep)...)
	}
	if c.Beanstalkd == "" && c.contends("beanstalkd") {
		rep.Notes = append(rep.Notes, "beanstalkd not given: its runs were skipped")
	}
	if c.Fsfloor == "" && c.contends("fsfloor") {
		rep.Notes = append(rep.Notes, "fsfloor not given: its runs were skipped")
	}
	if c.DatabaseURL == "" && (c.contends("postgres") || c.contends("river")) {
		rep.Notes = append(rep.Notes, "no --database-url: the runs on PostgreSQL (Taskhoster's and River's) were skipped")
	} else if c.River == "" && c.contends("river") {
		rep.Notes = append(rep.Notes, "river not given (--river): its runs were skipped")
	}
	if c.DatabaseURL != "" && c.DatabaseDir == "" {
		rep.Notes = append(rep.Notes, "no --database-dir: the database's CPU per task is not measured")
	}
	return rows
}

// runPeersAt runs, for each P = W, Runs rounds of: Taskhoster --sync always,
// beanstalkd -f 0, Taskhoster --sync none, beanstalkd without binlog,
// fsfloor in each floor mode, Taskhoster --sync always with batch posts,
// and with a database Taskhoster on PostgreSQL (one server, then two) and
// River (one job per transaction, then InsertMany batches), all with the
// same N and concurrency (Config.Contenders may leave some out); then the
// ratios, each taken within a round.
func runPeersAt(ctx context.Context, c Config, rep *Report) []PeerRow {
	var rows []PeerRow
	for _, p := range c.Loads {
		ld := c.load(p)
		batched := ld
		batched.Batch = c.Batch
		tps := map[string][]float64{}
		lat := map[string][]float64{}
		cpu := map[string][]float64{}
		dbCPU := map[string][]float64{}
		idle := map[string][]float64{}
		kthreads := map[string][]float64{}
		flushMs := map[string][]float64{}
		flushCallers := map[string][]float64{}
		// perRound[name][round] is 0 when that run failed.
		perRound := map[string][]float64{}
		// waits records where a run's time went besides its processes' CPU:
		// the machine's idle share and its kernel threads', and, for a
		// file-store server, its flushes.
		waits := func(name string, idlePct, kthreadsPct *float64, ms, callers float64) {
			if idlePct != nil {
				idle[name] = append(idle[name], *idlePct)
			}
			if kthreadsPct != nil {
				kthreads[name] = append(kthreads[name], *kthreadsPct)
			}
			if ms > 0 {
				flushMs[name] = append(flushMs[name], ms)
				flushCallers[name] = append(flushCallers[name], callers)
			}
		}
		record := func(name string, round int, v, l, c, db float64) {
			for len(perRound[name]) < round {
				perRound[name] = append(perRound[name], 0)
			}
			perRound[name][round-1] = v
			if v > 0 {
				tps[name] = append(tps[name], v)
				if l > 0 {
					lat[name] = append(lat[name], l)
				}
				if c > 0 {
					cpu[name] = append(cpu[name], c)
				}
				if db > 0 {
					dbCPU[name] = append(dbCPU[name], db)
				}
			}
		}
		for round := 1; round <= c.Runs && ctx.Err() == nil; round++ {
			prefix := fmt.Sprintf("peers %s K=%d N=%d round %d", p, c.K, c.N, round)
			failed := func(name string, err error) {
				rep.fail(prefix+" "+name, err)
				c.progress("%s %s: FAILED: %v", prefix, name, err)
				record(name, round, 0, 0, 0, 0)
			}
			th := func(sync string, ld Load) {
				if !c.contends("files") {
					return
				}
				name := "taskhoster " + sync
				if ld.Batch > 1 {
					name = batchName(ld.Batch)
				}
				r, err := throughputOnce(ctx, c, Socket, sync, ld)
				if err != nil {
					failed(name, err)
					return
				}
				record(name, round, r.TPS, r.LatP50, r.ServerCPU, 0)
				waits(name, r.Idle, r.KernelThreads, r.FlushMs, r.FlushCallers)
				c.progress("%s %s: %.0f done/s, server CPU %.2f ms/task; every task finished once", prefix, name, r.TPS, r.ServerCPU)
			}
			bs := func(binlog bool) {
				name := "beanstalkd nobinlog"
				if binlog {
					name = "beanstalkd -f0"
				}
				if c.Beanstalkd == "" || !c.contends("beanstalkd") {
					return
				}
				r, err := beanstalkOnce(ctx, c, binlog, ld)
				if err != nil {
					failed(name, err)
					return
				}
				record(name, round, r.TPS, r.LatP50, r.ServerCPU, 0)
				waits(name, r.Idle, r.KernelThreads, 0, 0)
				c.progress("%s %s: %.0f done/s, server CPU %.2f ms/task; every job deleted once", prefix, name, r.TPS, r.ServerCPU)
			}
			pg := func(servers int) {
				if c.DatabaseURL == "" || !c.contends("postgres") {
					return
				}
				name := pgName(servers)
				r, db, err := pgThroughputOnce(ctx, c, servers, ld)
				if err != nil {
					failed(name, err)
					return
				}
				record(name, round, r.TPS, r.LatP50, r.ServerCPU, db)
				waits(name, r.Idle, r.KernelThreads, 0, 0)
				c.progress("%s %s: %.0f done/s, server CPU %.2f ms/task, database CPU %.2f ms/task; every task finished once, one result line each",
					prefix, name, r.TPS, r.ServerCPU, db)
			}
			river := func(ld Load) {
				if c.River == "" || !c.contends("river") {
					return
				}
				name := RiverName
				if ld.Batch > 1 {
					name = riverBatchName(ld.Batch)
				}
				dbm := startClusterCPU(c.DatabaseDir)
				rr, err := River(ctx, c.River, c.DatabaseURL, ld)
				db := dbm.perTask(ld.N)
				if err != nil {
					failed(name, err)
					return
				}
				record(name, round, rr.TPS, 0, rr.CPU, db)
				waits(name, rr.Idle, rr.KernelThreads, 0, 0)
				c.progress("%s %s: %.0f done/s, its process's CPU %.2f ms/task, database CPU %.2f ms/task (synchronous_commit %s, PostgreSQL %s); every job worked once and completed",
					prefix, name, rr.TPS, rr.CPU, db, rr.SynchronousCommit, rr.Server)
			}
			th("always", ld)
			bs(true)
			pg(1)
			th("none", ld)
			bs(false)
			if c.Fsfloor != "" && c.contends("fsfloor") {
				for _, mode := range c.FloorModes {
					name := "fsfloor " + mode
					fr, err := Fsfloor(ctx, c.Fsfloor, c.Dir, mode, p.W*c.K, c.N)
					if err != nil {
						failed(name, err)
						continue
					}
					record(name, round, fr.TPS, 0, 0, 0)
					c.progress("%s %s (-c %d): %.0f cycles/s", prefix, name, p.W*c.K, fr.TPS)
				}
			}
			river(ld)
			if c.Batch > 1 {
				th("always", batched)
				river(batched)
			}
			pg(2)
		}
		row := PeerRow{P: p.P, W: p.W, K: c.K, N: c.N, TPS: summaries(tps), Lat: summaries(lat), CPU: summaries(cpu),
			DBCPU: summaries(dbCPU), Idle: summaries(idle), KernelThreads: summaries(kthreads), FlushMs: summaries(flushMs), FlushCallers: summaries(flushCallers)}
		ratio := func(label, a string, b func(round int) float64, target float64) {
			var v []float64
			for i, x := range perRound[a] {
				if y := b(i); x > 0 && y > 0 {
					v = append(v, x/y)
				}
			}
			if len(v) > 0 {
				row.Ratios = append(row.Ratios, PeerRatio{Name: label, Ratio: Summarize(v), Target: target})
			}
		}
		of := func(name string) func(int) float64 {
			return func(i int) float64 {
				if i < len(perRound[name]) {
					return perRound[name][i]
				}
				return 0
			}
		}
		// The best durable floor of each round.
		bestDurable := func(i int) float64 {
			best := 0.0
			for _, mode := range c.FloorModes {
				if mode != "none" {
					best = max(best, of("fsfloor "+mode)(i))
				}
			}
			return best
		}
		ratio("taskhoster always ÷ taskhoster none", "taskhoster always", of("taskhoster none"), 0.9)
		ratio("taskhoster always ÷ beanstalkd -f0", "taskhoster always", of("beanstalkd -f0"), 2.0)
		ratio(batchName(c.Batch)+" ÷ "+riverBatchName(c.Batch), batchName(c.Batch), of(riverBatchName(c.Batch)), 1.0)
		ratio("taskhoster none ÷ beanstalkd nobinlog", "taskhoster none", of("beanstalkd nobinlog"), 0)
		ratio("taskhoster always ÷ best durable fsfloor", "taskhoster always", bestDurable, 0.8)
		ratio("taskhoster none ÷ fsfloor none", "taskhoster none", of("fsfloor none"), 0.8)
		ratio("beanstalkd -f0 ÷ best durable fsfloor", "beanstalkd -f0", bestDurable, 0)
		ratio("taskhoster always (files) ÷ river", "taskhoster always", of(RiverName), 0)
		ratio(PGOneName+" ÷ river", PGOneName, of(RiverName), 1.0)
		ratio(PGTwoName+" ÷ 1 server", PGTwoName, of(PGOneName), 0)
		ratio(PGOneName+" ÷ taskhoster always (files)", PGOneName, of("taskhoster always"), 0)
		rows = append(rows, row)
	}
	return rows
}

// beanstalkOnce runs ld against a fresh beanstalkd, with its binlog (fsync
// after every write) in a fresh folder under c.Dir, or without binlog.
func beanstalkOnce(ctx context.Context, c Config, binlog bool, ld Load) (LoadRun, error) {
	dir := ""
	if binlog {
		d, err := os.MkdirTemp(c.Dir, "beanstalkd-")
		if err != nil {
			return LoadRun{}, err
		}
		defer func() { _ = (Folders{Root: d}).Remove() }()
		dir = filepath.Join(d, "binlog")
		if err := os.Mkdir(dir, 0o755); err != nil {
			return LoadRun{}, err
		}
	}
	b, err := StartBeanstalkd(c.Beanstalkd, dir)
	if err != nil {
		return LoadRun{}, err
	}
	defer b.Stop()
	cpu := startCPU(b.cmd.Process.Pid)
	r, err := BeanstalkThroughput(ctx, b.Addr, ld)
	r.ServerCPU, r.ClientCPU = cpu.perTask(ld.N)
	return r, err
}
