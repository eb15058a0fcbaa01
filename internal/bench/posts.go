package bench

import (
	"context"
	"fmt"
	"time"
)

// PostRun is one posts run: P producers post N tasks, no worker takes any.
type PostRun struct {
	// TPS is tasks posted per second, from the start to the last answer.
	TPS float64 `json:"tps"`
	// ServerCPU is the server process's CPU milliseconds per task.
	ServerCPU float64 `json:"server_cpu_ms_per_task"`
}

// Posts posts ld.N tasks to t with ld.P producers, one task per request
// (batch 1) or batch tasks per POST /{queue}/batch, and checks that every
// post was answered with an id of its own and that the queue's pending
// count grew by N. ld.W and ld.K are not used.
func Posts(ctx context.Context, t Target, ld Load, batch int) (PostRun, []string, error) {
	a := newAPI(t)
	defer a.close()
	before, err := a.counts(ctx)
	if err != nil {
		return PostRun{}, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, ld.Timeout)
	defer cancel()
	l := newLedger(ld.N)
	produceBatches(ctx, l, ld, batch, func(ctx context.Context, _ int, items [][]byte) ([]string, error) {
		if batch == 1 {
			id, err := a.post(ctx, items[0])
			return []string{id}, err
		}
		return a.postBatch(ctx, items)
	})
	if err := l.failed(); err != nil {
		return PostRun{}, nil, err
	}
	if err := ctx.Err(); err != nil {
		return PostRun{}, nil, fmt.Errorf("posts not finished after %s: %w", ld.Timeout, err)
	}
	var last int64
	seen := make(map[string]bool, ld.N)
	for i := range ld.N {
		if seen[l.ids[i]] {
			return PostRun{}, nil, fmt.Errorf("task %d got the id %s of another", i, l.ids[i])
		}
		seen[l.ids[i]] = true
		last = max(last, l.postEnd[i].Load())
	}
	after, err := a.counts(ctx)
	if err != nil {
		return PostRun{}, nil, err
	}
	if got := after["pending"] - before["pending"]; got != ld.N {
		return PostRun{}, nil, fmt.Errorf("%d tasks posted, but the queue's pending count grew by %d", ld.N, got)
	}
	return PostRun{TPS: rate(ld.N, time.Duration(last))}, l.ids, nil
}

// postsOnce is one posts run against a server started for it.
func postsOnce(ctx context.Context, c Config, sync string, p int, batch int) (PostRun, error) {
	var r PostRun
	err := withServer(c, sync, nil, func(s *Server) error {
		var err error
		cpu := startCPU(s.Pid())
		r, _, err = Posts(ctx, s.Target, c.load(Pair{P: p, W: 1}), batch)
		r.ServerCPU, _ = cpu.perTask(c.N)
		return err
	}, nil)
	return r, err
}

// runPosts runs, for each producer count and sync mode, Runs rounds of
// single posts then batch posts of c.Batch, on fresh servers; the ratio
// batch ÷ single is taken within each round.
func runPosts(ctx context.Context, c Config, rep *Report) []PostsRow {
	type key struct {
		p    int
		sync string
	}
	var keys []key
	for _, ld := range c.Loads {
		for _, s := range c.Syncs {
			keys = append(keys, key{ld.P, s})
		}
	}
	type figures struct{ single, batch, singleCPU, batchCPU, ratio []float64 }
	runs := make(map[key]*figures)
	failures := make(map[key]int)
	for _, k := range keys {
		runs[k] = &figures{}
	}
rounds:
	for round := 1; round <= c.Runs; round++ {
		for _, k := range keys {
			f := runs[k]
			var tps [2]float64
			for i, size := range []int{1, c.Batch} {
				if ctx.Err() != nil {
					break rounds
				}
				name := fmt.Sprintf("posts sync=%s P=%d N=%d batch=%d run %d", k.sync, k.p, c.N, size, round)
				r, err := postsOnce(ctx, c, k.sync, k.p, size)
				if err != nil {
					failures[k]++
					rep.fail(name, err)
					c.progress("%s: FAILED: %v", name, err)
					continue
				}
				tps[i] = r.TPS
				if size == 1 {
					f.single, f.singleCPU = append(f.single, r.TPS), append(f.singleCPU, r.ServerCPU)
				} else {
					f.batch, f.batchCPU = append(f.batch, r.TPS), append(f.batchCPU, r.ServerCPU)
				}
				c.progress("%s: %.0f tasks/s, server CPU %.3f ms/task; every task pending once", name, r.TPS, r.ServerCPU)
			}
			if tps[0] > 0 && tps[1] > 0 {
				f.ratio = append(f.ratio, tps[1]/tps[0])
			}
		}
	}
	var rows []PostsRow
	for _, k := range keys {
		f := runs[k]
		rows = append(rows, PostsRow{
			Sync: k.sync, P: k.p, N: c.N, Batch: c.Batch,
			Single: Summarize(f.single), Batched: Summarize(f.batch), Ratio: Summarize(f.ratio),
			SingleCPU: Summarize(f.singleCPU), BatchCPU: Summarize(f.batchCPU),
			Failed: failures[k],
		})
	}
	return rows
}
