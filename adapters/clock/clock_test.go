package clock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/taskhoster/taskhoster/adapters/clock"
)

func TestSystemIsNow(t *testing.T) {
	before := time.Now()
	got := clock.System{}.Now()
	after := time.Now()
	if got.Before(before) || got.After(after) {
		t.Errorf("System.Now() = %v, not within [%v, %v]", got, before, after)
	}
}

func TestFakeMovesOnlyWhenTold(t *testing.T) {
	start := time.Date(2026, 7, 26, 23, 59, 59, 0, time.UTC)
	f := clock.NewFake(start)
	if got := f.Now(); !got.Equal(start) {
		t.Fatalf("Now() = %v, want %v", got, start)
	}
	want := start.Add(2 * time.Second)
	if got := f.Advance(2 * time.Second); !got.Equal(want) {
		t.Errorf("Advance returned %v, want %v", got, want)
	}
	if got := f.Now(); !got.Equal(want) {
		t.Errorf("Now() after Advance = %v, want %v", got, want)
	}
	f.Set(start.Add(-time.Hour)) // back in time is allowed
	if got := f.Now(); !got.Equal(start.Add(-time.Hour)) {
		t.Errorf("Now() after Set = %v, want %v", got, start.Add(-time.Hour))
	}
}

func TestFakeIsSafeForConcurrentUse(t *testing.T) {
	const movers, steps = 8, 1000
	start := time.Date(2026, 7, 26, 0, 0, 0, 0, time.UTC)
	f := clock.NewFake(start)
	var wg sync.WaitGroup
	for range movers {
		wg.Go(func() {
			for range steps {
				f.Advance(time.Millisecond)
				f.Now()
			}
		})
	}
	wg.Wait()
	if got, want := f.Now(), start.Add(movers*steps*time.Millisecond); !got.Equal(want) {
		t.Errorf("Now() = %v, want %v", got, want)
	}
}
