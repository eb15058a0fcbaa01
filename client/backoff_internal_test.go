package client

import (
	"testing"
	"time"
)

func TestBackoffDoublesCapsAndJitters(t *testing.T) {
	tests := []struct {
		name string
		rand float64
		want []time.Duration
	}{
		// The lowest draw is half the delay, the highest (nearly) all of it.
		{"lowest draw", 0, []time.Duration{50, 100, 200, 400, 500, 500}},
		{"highest draw", 0.999999, []time.Duration{100, 200, 400, 800, 1000, 1000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBackoff(100*time.Millisecond, time.Second)
			b.rand = func() float64 { return tt.rand }
			for i, want := range tt.want {
				got := b.next().Round(time.Millisecond)
				if got != want*time.Millisecond {
					t.Errorf("wait %d = %v, want %v", i, got, want*time.Millisecond)
				}
			}
			b.reset()
			if got := b.next().Round(time.Millisecond); got != tt.want[0]*time.Millisecond {
				t.Errorf("after reset = %v, want %v", got, tt.want[0]*time.Millisecond)
			}
		})
	}
}

// TestBackoffStaysCapped: long after the doubling would overflow, every
// wait is still within [max/2, max].
func TestBackoffStaysCapped(t *testing.T) {
	b := newBackoff(time.Second, time.Minute)
	for i := range 200 {
		d := b.next()
		if i >= 6 && (d < 30*time.Second || d > time.Minute) {
			t.Fatalf("wait %d = %v, want within [30s, 1m]", i, d)
		}
	}
}
