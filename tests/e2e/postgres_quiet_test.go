package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/taskhoster/taskhoster/internal/pgtest"
)

// TestPostgresServerJoiningAQuietDatabase: a server that joins the
// database after the first one's notification listener has been idle (and
// so has checked its connection) still gets the first one's news. Here a
// resume on A (SPEC §12: "claims wait" only while paused; README: the
// servers "wake each other's waiting claims") must hand the pending task
// to a claim waiting on B, well before that claim's wait runs out.
func TestPostgresServerJoiningAQuietDatabase(t *testing.T) {
	url := pgtest.Database(t)
	da := newDirs(t)
	manageQueues(t, da)
	a := start(t, da, "--store", "postgres", "--database-url", url)
	listenerChecked(t, url)

	db := newDirs(t)
	manageQueues(t, db)
	b := start(t, db, "--store", "postgres", "--database-url", url)

	a.do("POST", "/opsopen/pause", "", ``).want(t, "pause on A", http.StatusOK, "")
	id := a.post("opsopen", "", `{"n":1}`)
	resumeHandsTaskToWaitingClaim(t, a, b, id)
}

// resumeHandsTaskToWaitingClaim resumes the queue opsopen, paused with
// task id pending, through server a, and checks that a claim waiting on
// server b gets the task well before its wait runs out.
func resumeHandsTaskToWaitingClaim(t *testing.T, a, b *server, id string) {
	t.Helper()
	claimed := make(chan response, 1)
	go func() { claimed <- b.do("POST", "/opsopen/claim", "", `{"worker":"w-b","wait":10}`) }()
	b.claimsWaiting("opsopen", 1)
	a.do("POST", "/opsopen/resume", "", ``).want(t, "resume on A", http.StatusOK, "")
	select {
	case r := <-claimed:
		if r.Status != http.StatusOK || r.JSON(t)["id"] != id {
			t.Fatalf("claim waiting on B after the resume on A: %d %s, want task %s", r.Status, r.Body, id)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the claim waiting on B did not answer")
	}
}

// listenerChecked waits until the one server on the database at url has
// checked its notification listener's connection once (after some seconds
// without news it sends a statement on it): the listener's session then
// shows a later query_start than the LISTEN it began with.
func listenerChecked(t *testing.T, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var pid int32
	var began pgtype.Timestamptz
	for ctx.Err() == nil {
		err := conn.QueryRow(ctx, `SELECT pid, query_start FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE 'LISTEN %'`).Scan(&pid, &began)
		if err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for ctx.Err() == nil {
		var at pgtype.Timestamptz
		if err := conn.QueryRow(ctx, `SELECT query_start FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&at); err != nil {
			t.Fatalf("the listener's session %d: %v", pid, err)
		}
		if at.Time.After(began.Time) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("the listener's session %d ran nothing after its LISTEN within 40 s", pid)
}
