package e2e

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/taskhoster/taskhoster/internal/pgtest"
)

// Two server processes on one database (issue 14), each with folders of its
// own (the hosts folder is the configuration, the logs folder its event
// log; with --store postgres the items folder holds nothing): news of a
// change on one reaches claims waiting on the other (LISTEN/NOTIFY).
func TestTwoServersOnOnePostgres(t *testing.T) {
	url := pgtest.Database(t)
	a := start(t, newDirs(t), "--store", "postgres", "--database-url", url)
	b := start(t, newDirs(t), "--store", "postgres", "--database-url", url)

	t.Run("a post on A wakes a claim waiting on B", func(t *testing.T) {
		claimed := make(chan response, 1)
		go func() { claimed <- b.do("POST", "/resize/claim", boxToken, `{"worker":"box-b","wait":10}`) }()
		time.Sleep(300 * time.Millisecond) // let the claim park on B
		began := time.Now()
		id := a.post("resize", aliceToken, `{"url":"https://ex.com/a.png","width":800}`)
		select {
		case r := <-claimed:
			if r.Status != http.StatusOK || r.JSON(t)["id"] != id {
				t.Fatalf("claim on B: %d %s, want task %s", r.Status, r.Body, id)
			}
			took := time.Since(began)
			t.Logf("claim on B answered %v after the post on A", took)
			if took > 2*time.Second {
				t.Errorf("claim on B answered after %v, want well before its 10 s wait ends", took)
			}
		case <-time.After(8 * time.Second):
			t.Fatal("the claim waiting on B was not woken by the post on A")
		}
		finish(t, b, id, "box-b")
	})

	t.Run("a worker socket dropping on B re-queues for a claim on A", func(t *testing.T) {
		id := a.post("resize", aliceToken, `{"url":"https://ex.com/b.png"}`)
		k := b.dial("/resize/work?worker=box-sock", boxToken)
		if got := k.claimTask(1)["id"]; got != id {
			t.Fatalf("socket on B claimed %v, want %s", got, id)
		}
		claimed := make(chan response, 1)
		go func() { claimed <- a.do("POST", "/resize/claim", boxToken, `{"worker":"box-a","wait":10}`) }()
		time.Sleep(300 * time.Millisecond) // let the claim park on A
		began := time.Now()
		_ = k.c.Close() // dropped, no goodbye
		select {
		case r := <-claimed:
			m := r.JSON(t)
			if r.Status != http.StatusOK || m["id"] != id || m["attempts"] != 2.0 {
				t.Fatalf("claim on A: %d %s, want task %s on its second attempt", r.Status, r.Body, id)
			}
			t.Logf("claim on A answered %v after the socket on B dropped", time.Since(began))
		case <-time.After(8 * time.Second):
			t.Fatal("the claim waiting on A did not get the task the socket on B held")
		}
		finish(t, a, id, "box-a")
	})

	t.Run("a cancel on A reaches the socket holding the task on B", func(t *testing.T) {
		id := a.post("resize", aliceToken, `{"url":"https://ex.com/c.png"}`)
		k := b.dial("/resize/work?worker=box-held", boxToken)
		defer k.c.Close()
		if got := k.claimTask(1)["id"]; got != id {
			t.Fatalf("socket on B claimed %v, want %s", got, id)
		}
		r := a.do("DELETE", "/resize/"+id, aliceToken, ``)
		wantReply(t, "the cancel on A", r.JSON(t), map[string]any{"accepted": true, "status": "failed"})
		wantReply(t, "the socket's message on B", k.next(), map[string]any{"type": "cancelled", "id": id})
	})

	t.Run("no task is claimed twice across both servers", func(t *testing.T) {
		const tasks, perServer = 60, 4
		var mu sync.Mutex
		claims := map[string]int{}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for i, s := range []*server{a, b, a, b, a, b, a, b}[:2*perServer] {
			worker := fmt.Sprintf("race-%d", i)
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					r := s.do("POST", "/resize/claim", boxToken, `{"worker":"`+worker+`","wait":1}`)
					if r.Status == http.StatusNoContent {
						continue
					}
					if r.Status != http.StatusOK {
						t.Errorf("claim: %d %s", r.Status, r.Body)
						return
					}
					id := r.JSON(t)["id"].(string)
					mu.Lock()
					claims[id]++
					mu.Unlock()
					res := s.do("POST", "/resize/"+id+"/result", boxToken, `{"worker":"`+worker+`","result":{"ok":true}}`)
					if res.Status != http.StatusOK || res.JSON(t)["accepted"] != true {
						t.Errorf("result of %s: %d %s", id, res.Status, res.Body)
					}
				}
			})
		}
		posted := map[string]bool{}
		for i := range tasks {
			s := []*server{a, b}[i%2]
			posted[s.post("resize", aliceToken, fmt.Sprintf(`{"url":"https://ex.com/%d.png"}`, i))] = true
		}
		eventually(t, "every task to be claimed", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(claims) >= tasks
		})
		close(stop)
		wg.Wait()
		for id := range posted {
			if claims[id] != 1 {
				t.Errorf("task %s claimed %d times", id, claims[id])
			}
		}
		if len(claims) != tasks {
			t.Errorf("%d tasks claimed, %d posted", len(claims), tasks)
		}
	})
}

// finish posts worker's result for task id on s.
func finish(t *testing.T, s *server, id, worker string) {
	t.Helper()
	r := s.do("POST", "/resize/"+id+"/result", boxToken, `{"worker":"`+worker+`","result":{"url":"done"}}`)
	if r.Status != http.StatusOK || r.JSON(t)["accepted"] != true {
		t.Fatalf("result of %s: %d %s", id, r.Status, r.Body)
	}
}

// A server alone on the database takes claims from stock, which knows only
// its own changes; once a second server starts, the first learns of it
// (its hello) before that server serves, and locks rows for its claims
// from then on: a claim waiting on the first gets a task the second posted.
func TestPostgresServerJoiningEndsClaimsFromStock(t *testing.T) {
	url := pgtest.Database(t)
	a := start(t, newDirs(t), "--store", "postgres", "--database-url", url)
	// A's stock is read, and holds every claimable task: none once this
	// one is claimed.
	id := a.post("resize", aliceToken, `{"url":"https://ex.com/alone.png"}`)
	if r := a.do("POST", "/resize/claim", boxToken, `{"worker":"box-a"}`); r.Status != http.StatusOK || r.JSON(t)["id"] != id {
		t.Fatalf("claim on A alone: %d %s, want task %s", r.Status, r.Body, id)
	}
	finish(t, a, id, "box-a")

	claimed := make(chan response, 1)
	go func() { claimed <- a.do("POST", "/resize/claim", boxToken, `{"worker":"box-a","wait":10}`) }()
	b := start(t, newDirs(t), "--store", "postgres", "--database-url", url)
	id = b.post("resize", aliceToken, `{"url":"https://ex.com/joined.png"}`)
	select {
	case r := <-claimed:
		if r.Status != http.StatusOK || r.JSON(t)["id"] != id {
			t.Fatalf("claim on A: %d %s, want task %s posted on B", r.Status, r.Body, id)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("the claim waiting on A did not get the task posted on B")
	}
	finish(t, a, id, "box-a")
}
