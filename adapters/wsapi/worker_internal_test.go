package wsapi

import (
	"fmt"
	"testing"

	"github.com/taskhoster/taskhoster/domain"
)

// A worker socket remembers at most maxEnded ended claims, the latest: a
// socket that lives for months, its leases lapsing, keeps a bounded set.
func TestEndedClaimsAreBounded(t *testing.T) {
	w := &worker{held: make(map[string]holding)}
	const ends = maxEnded + 100
	for i := range ends {
		id := fmt.Sprintf("%016x", i)
		claim := domain.Holder{Worker: "w1", Attempt: 1}
		w.held[id] = holding{claim: claim, unwatch: func() {}}
		w.end(id, claim)
	}
	if len(w.held) != 0 || len(w.ended) != maxEnded || len(w.endedIDs) != maxEnded {
		t.Fatalf("after %d ends: %d held, %d ended (%d in the ring), want 0 and %d", ends, len(w.held), len(w.ended), len(w.endedIDs), maxEnded)
	}
	for i := range ends {
		_, _, known := w.claimOf(fmt.Sprintf("%016x", i))
		if want := i >= ends-maxEnded; known != want {
			t.Fatalf("claim %d of %d remembered: %v, want %v (the latest %d)", i, ends, known, want, maxEnded)
		}
	}
}
