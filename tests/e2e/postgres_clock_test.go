package e2e

import (
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/taskhoster/taskhoster/adapters/clock"
	"github.com/taskhoster/taskhoster/internal/pgtest"
)

// Two servers on one database, one of them with a clock 30 s ahead
// (TASKHOSTER_TEST_CLOCK_SKEW): both judge time by the database's clock,
// so they agree on when a delayed task becomes claimable, when a lease
// lapses and when a queue times a task out, whichever server posted,
// claimed or sweeps. Each server sweeps every 100 ms.
func TestPostgresServersWithSkewedClocksAgree(t *testing.T) {
	url := pgtest.Database(t)
	clockQueues := func(d dirs) dirs {
		queues := filepath.Join(d.hosts, host, "taskhoster-queues")
		writeFile(t, filepath.Join(queues, "leased.json"), `{"item": {}, "settings": {"leaseSeconds": 3},
			"access": {"post":"public", "status":"public", "work":"public"}}`)
		writeFile(t, filepath.Join(queues, "timed.json"), `{"item": {}, "settings": {"queueSeconds": 3},
			"access": {"post":"public", "status":"public", "work":"public"}}`)
		return d
	}
	plain := start(t, clockQueues(newDirs(t)), "--store", "postgres", "--database-url", url)
	ahead, err := launchEnv(t, clockQueues(newDirs(t)), []string{clock.SkewEnv + "=30s"}, "--store", "postgres", "--database-url", url)
	if err != nil {
		t.Fatal(err)
	}
	servers := map[string]*server{"plain": plain, "ahead": ahead}

	// How early or late a time-based change may come: the clocks'
	// agreement is within a millisecond or so; the rest is the sweep's
	// 100 ms period, polling and a loaded machine.
	const early, late = 100 * time.Millisecond, 2500 * time.Millisecond

	// when polls cond every 50 ms for up to limit and returns how long it
	// took to hold, from since; it fails the test if cond never does.
	when := func(t *testing.T, what string, since time.Time, limit time.Duration, cond func() bool) time.Duration {
		t.Helper()
		for !cond() {
			if time.Since(since) > limit {
				t.Fatalf("%s: not after %v", what, limit)
			}
			time.Sleep(50 * time.Millisecond)
		}
		return time.Since(since)
	}
	// status reads a task's status through s.
	status := func(t *testing.T, s *server, queue, id string) string {
		r := s.do("GET", "/"+queue+"/"+id, "", "")
		if r.Status != http.StatusOK {
			t.Errorf("status of %s: %d %s", id, r.Status, r.Body)
			return ""
		}
		st, _ := r.JSON(t)["status"].(string)
		return st
	}
	// requeues counts the requeue events of a task in the servers' log,
	// which they share in the database: the servers sweep side by side,
	// and one of them makes the change.
	requeues := func(id string) int {
		n := 0
		for _, ev := range servers["plain"].eventsOf(id) {
			if ev == "requeue" {
				n++
			}
		}
		return n
	}

	for i, c := range []struct{ by, other string }{{"ahead", "plain"}, {"plain", "ahead"}} {
		by, other := servers[c.by], servers[c.other]
		// The subtests run side by side on one queue: each claims only its
		// own task, by a query on the item.
		delayed, leased := fmt.Sprintf(`{"n": %d}`, 10+i), fmt.Sprintf(`{"n": %d}`, 20+i)
		only := func(item string) string { return `, "query": {"const": ` + item + `}}` }

		// A task posted with delay=5 through one server is claimable
		// through the other after 5 s: not before, and not 30 s late.
		t.Run("delay posted "+c.by, func(t *testing.T) {
			t.Parallel()
			sent := time.Now()
			r := by.do("POST", "/leased?delay=5", "", delayed)
			if r.Status != http.StatusCreated {
				t.Fatalf("post: %d %s", r.Status, r.Body)
			}
			posted := time.Now()
			id := r.JSON(t)["id"].(string)
			took := when(t, "claim of the delayed task through "+c.other, posted, 5*time.Second+late, func() bool {
				r := other.do("POST", "/leased/claim", "", `{"worker": "w-`+c.other+`"`+only(delayed))
				if r.Status == http.StatusOK && r.JSON(t)["id"] != id {
					t.Errorf("claimed %s, want %s", r.JSON(t)["id"], id)
				}
				return r.Status == http.StatusOK
			})
			if gone := posted.Add(took).Sub(sent); gone < 5*time.Second-early {
				t.Errorf("the task posted with delay=5 through %s was claimed through %s after %v", c.by, c.other, gone)
			}
		})

		// A lease of 3 s taken through one server is lapsed (by either
		// server's sweep) after 3 s: not before, and not 30 s late; once.
		t.Run("lease taken "+c.by, func(t *testing.T) {
			t.Parallel()
			id := by.post("leased", "", leased)
			sent := time.Now()
			r := by.do("POST", "/leased/claim", "", `{"worker": "w-`+c.by+`"`+only(leased))
			if r.Status != http.StatusOK || r.JSON(t)["id"] != id {
				t.Fatalf("claim: %d %s, want task %s", r.Status, r.Body, id)
			}
			claimed := time.Now()
			took := when(t, "the lease's lapse", claimed, 3*time.Second+late, func() bool {
				return status(t, other, "leased", id) == "pending"
			})
			if gone := claimed.Add(took).Sub(sent); gone < 3*time.Second-early {
				t.Errorf("the 3 s lease taken through %s lapsed after %v", c.by, gone)
			}
			eventually(t, "the requeue line", func() bool { return requeues(id) > 0 })
			time.Sleep(300 * time.Millisecond) // a few more sweeps of both
			if n := requeues(id); n != 1 {
				t.Errorf("%d requeue events of %s in the two logs, want 1", n, id)
			}
		})

		// A task of a queue with queueSeconds 3 posted through one server
		// is timed out after 3 s: not before, and not 30 s late.
		t.Run("timeout posted "+c.by, func(t *testing.T) {
			t.Parallel()
			sent := time.Now()
			id := by.post("timed", "", `{}`)
			posted := time.Now()
			took := when(t, "the queue timeout", posted, 3*time.Second+late, func() bool {
				return status(t, other, "timed", id) == "failed"
			})
			if gone := posted.Add(took).Sub(sent); gone < 3*time.Second-early {
				t.Errorf("the task posted through %s timed out after %v", c.by, gone)
			}
		})
	}
}
