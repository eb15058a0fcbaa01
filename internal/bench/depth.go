package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/taskhoster/taskhoster/domain"
)

// Prefill writes n pending tasks of the bench queue straight into the
// items folder, in the exact form the store writes (domain.EncodeTask),
// as a server would have left them. Their items are of kind "filler";
// they were posted one millisecond apart, ending a minute ago, so any task
// posted later is younger than all of them. The files are flushed to the
// disc before it returns, so their write-back does not disturb what is
// measured next.
func Prefill(ctx context.Context, f Folders, n, itemBytes int) error {
	q := filepath.Join(f.Items, benchHost, benchQueue)
	for _, d := range domain.Dirs {
		if err := os.MkdirAll(filepath.Join(q, d), 0o750); err != nil {
			return err
		}
	}
	pending := f.PendingDir()
	prefix := rand.Uint32()
	first := time.Now().Add(-time.Minute).UnixMilli() - int64(n)
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		err  error
	)
	for range 8 {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t := domain.Task{
					ID: fmt.Sprintf("%08x%08x", prefix, i), Host: benchHost, Queue: benchQueue,
					Status: domain.Pending, Item: item(i, "filler", itemBytes),
					PostedAt: first + int64(i), UpdatedAt: first + int64(i),
				}
				if e := os.WriteFile(filepath.Join(pending, t.ID+".json"), domain.EncodeTask(t), 0o600); e != nil {
					mu.Lock()
					err = e
					mu.Unlock()
					next.Store(int64(n)) // stop the others
					return
				}
			}
		})
	}
	wg.Wait()
	syscall.Sync()
	if err == nil {
		err = ctx.Err()
	}
	return err
}

// matchQuery accepts only the items of kind "match"; no filler matches it.
var matchQuery = json.RawMessage(`{"type":"object","required":["kind"],"properties":{"kind":{"const":"match"}}}`)

// DepthRun is the claim latency with many pending tasks, in milliseconds,
// over the worker socket (claim sent → task arrived).
type DepthRun struct {
	Pending int
	// NoMatch: every pending task fails the claim's query but one, the
	// youngest, posted just before the claim. First is the very first such
	// claim (the server has never seen the query); P50 and P99 are over the
	// claims after it.
	NoMatchFirst, NoMatchP50, NoMatchP99 float64
	// Any: a claim without a query takes the oldest pending task; a filler
	// is posted after each claim to keep the count.
	AnyP50, AnyP99 float64
}

// Depth measures claims on a queue that holds pending tasks (prefilled):
// claims claims with a query only one posted task matches, then claims
// claims without a query. One claim may take up to wait (the first one
// tests every pending item against the query).
func Depth(ctx context.Context, t Target, pending, claims, itemBytes int, wait time.Duration) (DepthRun, error) {
	a := newAPI(t)
	defer a.close()
	s, err := openLockstep(ctx, a, "depth", wait)
	if err != nil {
		return DepthRun{}, err
	}
	defer s.close()
	r := DepthRun{Pending: pending}

	// One claim: post (if kind is not empty) and wait for the 201, then
	// claim with query and time it, then finish the task handed out.
	one := func(kind string, query json.RawMessage, seq int) (time.Duration, string, error) {
		var posted string
		if kind != "" {
			id, err := a.post(ctx, item(seq, kind, itemBytes))
			if err != nil {
				return 0, "", err
			}
			posted = id
		}
		t0 := time.Now()
		if err := s.claim(query); err != nil {
			return 0, "", err
		}
		got, err := s.next(ctx, "task")
		if err != nil {
			return 0, "", fmt.Errorf("depth claim: %w", err)
		}
		took := got.at.Sub(t0)
		if posted != "" && got.m.ID != posted {
			return 0, "", fmt.Errorf("depth: posted %s, claim got %s", posted, got.m.ID)
		}
		return took, got.m.ID, s.finish(ctx, got.m.ID)
	}

	var noMatch []time.Duration
	for i := range claims + 1 {
		took, _, err := one("match", matchQuery, i)
		if err != nil {
			return r, err
		}
		if i == 0 {
			r.NoMatchFirst = ms(took)
			continue
		}
		noMatch = append(noMatch, took)
	}
	r.NoMatchP50, r.NoMatchP99 = ms(Percentile(noMatch, 50)), ms(Percentile(noMatch, 99))

	var anyq []time.Duration
	for i := range claims {
		took, _, err := one("", nil, i)
		if err != nil {
			return r, err
		}
		anyq = append(anyq, took)
		if _, err := a.post(ctx, item(pending+i, "filler", itemBytes)); err != nil {
			return r, err
		}
	}
	r.AnyP50, r.AnyP99 = ms(Percentile(anyq, 50)), ms(Percentile(anyq, 99))
	return r, nil
}

// MemoryRun is the server's memory before and after n pending tasks were
// posted to an empty queue (bytes).
type MemoryRun struct {
	Tasks                   int
	RSSBefore, RSSAfter     int64
	HeapBefore, HeapAfter   float64 // go_memstats_alloc_bytes
	RSSPerTask, HeapPerTask float64
	ItemBytes               int
}

// Memory posts n tasks (with p producers) to s, which holds no task yet,
// and reads its memory before and after, each time after a pause of settle
// for the garbage of the last requests to go. Run it on a server with
// --sync none: only the memory is measured.
func Memory(ctx context.Context, s *Server, n, p, itemBytes int, settle time.Duration) (MemoryRun, error) {
	a := newAPI(s.Target)
	defer a.close()
	r := MemoryRun{Tasks: n, ItemBytes: itemBytes}
	read := func() (int64, float64, error) {
		time.Sleep(settle)
		rss, err := RSS(s.Pid())
		if err != nil {
			return 0, 0, err
		}
		heap, err := Metric(ctx, http.DefaultClient, s.Admin, "go_memstats_alloc_bytes")
		return rss, heap, err
	}
	var err error
	if r.RSSBefore, r.HeapBefore, err = read(); err != nil {
		return r, err
	}
	l := newLedger(n)
	produce(ctx, l, Load{N: n, P: p, ItemBytes: itemBytes}, func(ctx context.Context, _ int, body []byte) (string, error) {
		return a.post(ctx, body)
	})
	if err := l.failed(); err != nil {
		return r, err
	}
	if r.RSSAfter, r.HeapAfter, err = read(); err != nil {
		return r, err
	}
	r.RSSPerTask = float64(r.RSSAfter-r.RSSBefore) / float64(n)
	r.HeapPerTask = (r.HeapAfter - r.HeapBefore) / float64(n)
	return r, nil
}
