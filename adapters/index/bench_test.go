package index_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/taskhoster/taskhoster/adapters/index"
	"github.com/taskhoster/taskhoster/adapters/schema"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

var (
	benchRef   = domain.QueueRef{Host: "task.example.com", Queue: "resize"}
	benchEpoch = time.UnixMilli(1751500000000)
)

// benchItem is a ~200-byte item, the size the load uses, whose
// "kind" a claim query can select on.
func benchItem(kind string, n int) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(
		`{"kind":%q,"url":"https://images.example.com/uploads/2025/07/%08d/original.png","width":800,"height":600,"format":"webp","quality":82,"owner":"user-%06d"}`,
		kind, n, n%1000000))
}

// benchTask is task n as the start-up scan would hand it over: decoded from
// its stored form, so with the strings and slices a decode allocates.
func benchTask(tb testing.TB, n int, kind string) domain.Task {
	posted, _ := domain.Post(fmt.Sprintf("%016x", 0xc000000000+n), benchRef.Host, benchRef.Queue,
		benchItem(kind, n), "alice", benchEpoch.Add(time.Duration(n)*time.Millisecond))
	t, err := domain.DecodeTask(domain.EncodeTask(posted))
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

// schemaMatcher is a claim query as the app builds it (app.matcher).
type schemaMatcher struct {
	key    string
	schema domain.Schema
}

func (m *schemaMatcher) Key() string                     { return m.key }
func (m *schemaMatcher) Match(item json.RawMessage) bool { return len(m.schema.Validate(item)) == 0 }

func kindQuery(tb testing.TB, kind string) ports.Matcher {
	text := `{"type":"object","properties":{"kind":{"const":"` + kind + `"}},"required":["kind"]}`
	s, err := schema.Compile(json.RawMessage(text))
	if err != nil {
		tb.Fatal(err)
	}
	return &schemaMatcher{key: text, schema: s}
}

func benchClaim(t *domain.Task) error {
	next, _, err := t.Claim("box-1", time.Minute, benchEpoch)
	*t = next
	return err
}

// depthRig is a queue with a pending backlog that a claim query (kind
// "video") does not match, for timing claims at that depth (issue 6).
type depthRig struct {
	s      *index.Store
	videos ports.Matcher
	next   int
}

func newDepthRig(b *testing.B, depth int) *depthRig {
	r := &depthRig{s: index.New(), videos: kindQuery(b, "video"), next: depth}
	for n := range depth {
		if _, err := r.s.Load(benchTask(b, n, "image")); err != nil {
			b.Fatal(err)
		}
	}
	// The query meets the backlog once, before any timing.
	r.round(b)
	return r
}

// round posts one matching task and claims it; it returns how long the
// claim alone took.
func (r *depthRig) round(b *testing.B) time.Duration {
	ctx := context.Background()
	posted, _ := domain.Post(fmt.Sprintf("%016x", 0xc000000000+r.next), benchRef.Host, benchRef.Queue,
		benchItem("video", r.next), "alice", benchEpoch.Add(time.Duration(r.next)*time.Millisecond))
	r.next++
	if err := r.s.Create(ctx, posted, nil); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	got, err := r.s.ClaimNext(ctx, benchRef, r.videos, benchEpoch, benchClaim, nil)
	took := time.Since(start)
	if err != nil || got.ID != posted.ID {
		b.Fatalf("claim = %s, %v; want %s", got.ID, err, posted.ID)
	}
	return took
}

// BenchmarkClaimDepth measures a claim whose query matches none of the
// pending backlog: each round posts one matching task and claims it (issue
// 6, depth). claim-p50/p99 time the ClaimNext call alone; ns/op is post plus
// claim.
func BenchmarkClaimDepth(b *testing.B) {
	for _, depth := range []int{100, 10_000, 1_000_000} {
		b.Run(strconv.Itoa(depth), func(b *testing.B) {
			r := newDepthRig(b, depth)
			runtime.GC()
			var took []time.Duration
			for b.Loop() {
				took = append(took, r.round(b))
			}
			reportQuantiles(b, took)
		})
	}
}

// BenchmarkClaimDepthRatio alternates rounds between a queue 100 deep and
// one 1 000 000 deep, so that both see the same machine load and the same
// garbage collector, and reports the ratio of their median claim times
// (issue 6: at most 1.3).
func BenchmarkClaimDepthRatio(b *testing.B) {
	shallow, deep := newDepthRig(b, 100), newDepthRig(b, 1_000_000)
	runtime.GC()
	var tookShallow, tookDeep []time.Duration
	for b.Loop() {
		tookShallow = append(tookShallow, shallow.round(b))
		tookDeep = append(tookDeep, deep.round(b))
	}
	p50 := func(took []time.Duration) float64 {
		slices.Sort(took)
		return float64(took[len(took)/2].Nanoseconds())
	}
	s, d := p50(tookShallow), p50(tookDeep)
	b.ReportMetric(s, "p50-100-ns")
	b.ReportMetric(d, "p50-1M-ns")
	b.ReportMetric(d/s, "ratio")
}

// reportQuantiles reports the median and 99th percentile of took.
func reportQuantiles(b *testing.B, took []time.Duration) {
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "claim-p50-ns")
	b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds()), "claim-p99-ns")
}

// BenchmarkIndexMemory reports what the index keeps per pending task beyond
// the item bytes (issue 6: at most 300), after loading 100 000 tasks as the
// start-up scan does. The load is measured once, whatever b.N is; ns/op is
// meaningless.
func BenchmarkIndexMemory(b *testing.B) {
	const tasks = 100_000
	before := heapInUse()
	s := index.New()
	itemBytes := 0
	for n := range tasks {
		t := benchTask(b, n, "image")
		itemBytes += len(t.Item)
		if _, err := s.Load(t); err != nil {
			b.Fatal(err)
		}
	}
	after := heapInUse()
	runtime.KeepAlive(s)
	for b.Loop() {
	}
	b.ReportMetric(float64(int64(after)-int64(before)-int64(itemBytes))/tasks, "B/task")
	b.ReportMetric(float64(itemBytes)/tasks, "item-B/task")
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
