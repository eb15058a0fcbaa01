package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/internal/pgtest"
)

// A server on PostgreSQL (--store postgres) posts, claims and finishes a
// task as on files, and a claim waiting for work takes a task posted while
// it waits.
func TestPostgresStoreSmoke(t *testing.T) {
	s := start(t, newDirs(t), "--store", "postgres", "--database-url", pgtest.Database(t))

	id := s.post("resize", aliceToken, `{"url": "https://ex.com/a.png", "width": 800}`)
	r := s.do("POST", "/resize/claim", boxToken, `{"worker": "box-1"}`)
	if r.Status != http.StatusOK || r.JSON(t)["id"] != id {
		t.Fatalf("claim: %d %s", r.Status, r.Body)
	}
	r = s.do("POST", "/resize/"+id+"/result", boxToken, `{"worker":"box-1","result":{"url":"https://ex.com/a.jpg"}}`)
	if diff := cmp.Diff(map[string]any{"accepted": true}, r.JSON(t)); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
	view := s.do("GET", "/resize/"+id, aliceToken, "").JSON(t)
	if view["status"] != "finished" || !cmp.Equal(view["result"], map[string]any{"url": "https://ex.com/a.jpg"}) {
		t.Errorf("view after the result = %v", view)
	}
	if exists(s.taskFile("resize", "done", id)) {
		t.Error("a task file was written on the PostgreSQL store")
	}
	if got := s.eventsOf(id); !cmp.Equal(got, []string{"posted", "claimed", "result", "fetched"}) {
		t.Errorf("events = %v", got)
	}

	// A claim that waits is woken by a post, and takes the task.
	claimed := make(chan response, 1)
	go func() { claimed <- s.do("POST", "/resize/claim", boxToken, `{"worker": "box-2", "wait": 20}`) }()
	// Parked or not when the post lands, the claim must get the task: a
	// wake published before the post's COMMIT would find nothing and end
	// in 204 after 20 s.
	second := s.post("resize", aliceToken, `{"url": "https://ex.com/b.png", "width": 400}`)
	select {
	case r := <-claimed:
		if r.Status != http.StatusOK || r.JSON(t)["id"] != second {
			t.Fatalf("waiting claim: %d %s, want task %s", r.Status, r.Body, second)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting claim was not woken by the post")
	}
}
