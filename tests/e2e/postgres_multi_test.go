package e2e

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gorilla/websocket"

	"github.com/taskhoster/taskhoster/internal/pgtest"
)

// Two servers on one database in the ways the earlier tests did not try:
// a watch across servers, posts with one key racing on both, a server
// that joins, leaves or restarts while another runs, a listener cut.

// twoManaged starts two servers on one new database, each with the
// manage fixture's queues.
func twoManaged(t *testing.T) (a, b *server, url string) {
	t.Helper()
	url = pgtest.Database(t)
	da, db := newDirs(t), newDirs(t)
	manageQueues(t, da)
	manageQueues(t, db)
	a = start(t, da, "--store", "postgres", "--database-url", url)
	b = start(t, db, "--store", "postgres", "--database-url", url)
	return a, b, url
}

// A watch on B sees every change made on A, in order, each once, then 1000.
func TestPostgresWatchOnOneServerOfChangesOnAnother(t *testing.T) {
	a, b, _ := twoManaged(t)
	id := a.post("resize", aliceToken, `{"url":"a"}`)
	w := b.dial("/resize/"+id+"/watch", aliceToken)
	if got := summary(t, []byte(w.nextRaw())); got != "pending 0 null null" {
		t.Fatalf("first view %s", got)
	}
	k := a.dial("/resize/work?worker=box-1", boxToken)
	k.claimTask(1)
	k.send(`{"type":"progress","ref":2,"id":"` + id + `","progress":{"percent":30}}`)
	if m := k.next(); m["accepted"] != true {
		t.Fatalf("progress: %v", m)
	}
	k.send(`{"type":"result","ref":3,"id":"` + id + `","result":{"url":"b"}}`)
	if m := k.next(); m["accepted"] != true {
		t.Fatalf("result: %v", m)
	}
	got, code := watchAll(t, w)
	want := []string{"processing 1 null null", `processing 1 {"percent":30} null`, `finished 1 {"percent":30} {"url":"b"}`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("views on B (-want +got):\n%s", diff)
	}
	if code != websocket.CloseNormalClosure {
		t.Errorf("close %d", code)
	}
}

// Posts with one Idempotency-Key racing on two servers make one task: one
// 201, the others 200 with its id (SPEC §12: "for posts racing each other").
func TestPostgresIdempotentPostsRacingOnTwoServers(t *testing.T) {
	a, b, _ := twoManaged(t)
	for round := range 5 {
		key := fmt.Sprintf("k-%d", round)
		var wg sync.WaitGroup
		var mu sync.Mutex
		ids := map[string]int{}
		statuses := map[int]int{}
		for i := range 8 {
			s := []*server{a, b}[i%2]
			wg.Go(func() {
				h := http.Header{"Idempotency-Key": {key}}
				r := s.doHeader("POST", "/opsopen", host, "", `{"n":1}`, h)
				mu.Lock()
				defer mu.Unlock()
				statuses[r.Status]++
				if r.Status == 200 || r.Status == 201 {
					ids[r.JSON(t)["id"].(string)]++
				} else {
					t.Errorf("post: %d %s", r.Status, r.Body)
				}
			})
		}
		wg.Wait()
		if len(ids) != 1 || statuses[201] != 1 {
			t.Errorf("round %d: ids %v statuses %v", round, ids, statuses)
		}
	}
}

// A worker socket on A holds a task claimed while A was alone; B joins and
// cancels: the socket is told.
func TestPostgresCancelOnAJoiningServerReachesTheFirstsSocket(t *testing.T) {
	url := pgtest.Database(t)
	da, db := newDirs(t), newDirs(t)
	manageQueues(t, da)
	manageQueues(t, db)
	a := start(t, da, "--store", "postgres", "--database-url", url)
	id := a.post("opsopen", "", `{"n":1}`)
	k := a.dial("/opsopen/work?worker=box-a", "")
	if got := k.claimTask(1)["id"]; got != id {
		t.Fatalf("claimed %v", got)
	}
	b := start(t, db, "--store", "postgres", "--database-url", url)
	wantReply(t, "cancel on B", b.do("DELETE", "/opsopen/"+id, "", ``).JSON(t), map[string]any{"accepted": true, "status": "failed"})
	wantReply(t, "the socket on A", k.next(), map[string]any{"type": "cancelled", "id": id})
}

// A's listener is cut; B posts meanwhile; the socket claim waiting on A
// gets the task, and a cancel on B afterwards reaches it.
func TestPostgresListenerCutWakesClaims(t *testing.T) {
	url := pgtest.Database(t)
	da, db := newDirs(t), newDirs(t)
	manageQueues(t, da)
	manageQueues(t, db)
	a := start(t, da, "--store", "postgres", "--database-url", url)
	pidA := listenerPID(t, url)
	b := start(t, db, "--store", "postgres", "--database-url", url)

	k := a.dial("/opsopen/work?worker=box-a", "")
	k.send(`{"type":"claim","ref":1}`)
	a.claimsWaiting("opsopen", 1)
	terminate(t, url, pidA)
	id := b.post("opsopen", "", `{"n":1}`)
	m := k.next()
	if m["type"] != "task" || m["id"] != id {
		t.Fatalf("socket on A: %v, want task %s", m, id)
	}
	// A cancel on B still reaches the socket on A.
	wantReply(t, "cancel on B", b.do("DELETE", "/opsopen/"+id, "", ``).JSON(t), map[string]any{"accepted": true, "status": "failed"})
	wantReply(t, "the socket on A", k.next(), map[string]any{"type": "cancelled", "id": id})
}

// B shuts down holding a task on a socket; the claim waiting on
// A gets it at once.
func TestPostgresShutdownRequeuesToAnotherServer(t *testing.T) {
	a, b, _ := twoManaged(t)
	id := a.post("opsopen", "", `{"n":1}`)
	k := b.dial("/opsopen/work?worker=box-b", "")
	if got := k.claimTask(1)["id"]; got != id {
		t.Fatalf("claimed %v", got)
	}
	claimed := make(chan response, 1)
	go func() { claimed <- a.do("POST", "/opsopen/claim", "", `{"worker":"box-a","wait":20}`) }()
	a.claimsWaiting("opsopen", 1)
	b.stop()
	select {
	case r := <-claimed:
		if r.Status != 200 || r.JSON(t)["id"] != id {
			t.Fatalf("claim on A: %d %s", r.Status, r.Body)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("claim on A not answered")
	}
}

// B is killed holding a task; A's sweep re-queues it for A's
// waiting claim; B restarts and a post on it wakes a claim on A.
func TestPostgresKilledServerRestartsBesideAnother(t *testing.T) {
	url := pgtest.Database(t)
	da, db := newDirs(t), newDirs(t)
	a := start(t, da, "--store", "postgres", "--database-url", url)
	b := start(t, db, "--store", "postgres", "--database-url", url)
	id := a.post("public", "", `{"n":1}`)
	k := b.dial("/public/work?worker=box-b", "")
	if got := k.claimTask(1)["id"]; got != id {
		t.Fatalf("claimed %v", got)
	}
	claimed := make(chan response, 1)
	go func() { claimed <- a.do("POST", "/public/claim", "", `{"worker":"box-a","wait":10}`) }()
	a.claimsWaiting("public", 1)
	b.kill()
	r := <-claimed
	if r.Status != 200 || r.JSON(t)["id"] != id {
		t.Fatalf("claim on A: %d %s", r.Status, r.Body)
	}
	b = start(t, db, "--store", "postgres", "--database-url", url)
	go func() { claimed <- a.do("POST", "/public/claim", "", `{"worker":"box-a","wait":10}`) }()
	a.claimsWaiting("public", 1)
	id = b.post("public", "", `{"n":2}`)
	r = <-claimed
	if r.Status != 200 || r.JSON(t)["id"] != id {
		t.Fatalf("claim on A after B restarted: %d %s", r.Status, r.Body)
	}
	// And the other way round.
	go func() { claimed <- b.do("POST", "/public/claim", "", `{"worker":"box-b","wait":10}`) }()
	b.claimsWaiting("public", 1)
	id = a.post("public", "", `{"n":3}`)
	r = <-claimed
	if r.Status != 200 || r.JSON(t)["id"] != id {
		t.Fatalf("claim on B after it restarted: %d %s", r.Status, r.Body)
	}
}
