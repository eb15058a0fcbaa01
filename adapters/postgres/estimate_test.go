package postgres

import (
	"testing"
	"time"
)

// A measurement taken over a stretched round trip does not replace a
// tighter one still within its drift, and does once the tighter one has
// aged past it; a measurement that disagrees with the one in use beyond
// both bounds (the local clock was stepped) replaces it whatever its bound.
func TestEstimateKeepsTheTighterBound(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	good := estimate{offset: 0, bound: 100 * time.Microsecond, at: t0}
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		m    estimate
		want bool
	}{
		{"tighter", estimate{offset: 50 * time.Microsecond, bound: 50 * time.Microsecond, at: t0.Add(5 * time.Second)}, true},
		{"as tight as the old one grown by 5 s of drift", estimate{bound: 600 * time.Microsecond, at: t0.Add(5 * time.Second)}, true},
		{"wider, 5 s later, agreeing", estimate{offset: 2 * ms, bound: 2 * ms, at: t0.Add(5 * time.Second)}, false},
		{"wider, 5 s later, lopsided the other way", estimate{offset: -ms, bound: 2 * ms, at: t0.Add(5 * time.Second)}, false},
		{"wider, but the old one is 30 s old", estimate{offset: 2 * ms, bound: 2 * ms, at: t0.Add(30 * time.Second)}, true},
		{"a step of the local clock", estimate{offset: 10 * time.Second, bound: 2 * ms, at: t0.Add(5 * time.Second)}, true},
		{"a step back", estimate{offset: -300 * ms, bound: 5 * ms, at: t0.Add(time.Second)}, true},
	} {
		if got := tc.m.better(good); got != tc.want {
			t.Errorf("%s: better = %v, want %v", tc.name, got, tc.want)
		}
	}
}
