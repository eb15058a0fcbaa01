package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskhoster/taskhoster/internal/pgtest"
)

// TestPostgresServerJoiningWhileAnothersListenerIsDown: server B starts
// while A's notification listener is down (A cannot log in for a while),
// so each thinks itself alone and sends nothing. Meanwhile A cancels the
// task a worker socket on B holds, and posts a task a claim waiting on B
// could take. Once A's listener is back it finds B: B's socket is told of
// the cancel (SPEC §12: at once) and its waiting claim gets the task
// (README: the servers wake each other's waiting claims), though neither
// change was ever announced.
func TestPostgresServerJoiningWhileAnothersListenerIsDown(t *testing.T) {
	url := pgtest.Database(t)
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	role := "a_of_" + cfg.Database // A's own role: it alone can be kept out
	sql(t, url, `CREATE ROLE `+role+` SUPERUSER LOGIN`)
	t.Cleanup(func() { sql(t, url, `ALTER ROLE `+role+` LOGIN`) })
	// A's pool keeps all its connections open (pool_min_conns as its
	// size), and they are open before A is kept out: else a request of A's
	// that needed one more would fail (500) for the test's sake alone.
	const poolSize = 16
	urlA := strings.Replace(url, "postgres://postgres@", "postgres://"+role+"@", 1) + fmt.Sprintf("&pool_min_conns=%d&pool_max_conns=%d", poolSize, poolSize)
	da, db := newDirs(t), newDirs(t)
	manageQueues(t, da)
	manageQueues(t, db)
	a := start(t, da, "--store", "postgres", "--database-url", urlA)
	eventually(t, "A's pool and listener to connect", func() bool {
		var have int
		onDatabase(t, url, func(ctx context.Context, conn *pgx.Conn) error {
			return conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE usename = $1`, role).Scan(&have)
		})
		return have >= poolSize+1
	})
	pidA := listenerPID(t, url)
	// Kept from logging in, A serves on with its pool's connections, but
	// its listener cannot come back.
	sql(t, url, `ALTER ROLE `+role+` NOLOGIN`)
	terminate(t, url, pidA)

	b := start(t, db, "--store", "postgres", "--database-url", url)
	held := b.post("opsopen", "", `{"n":0}`)
	k := b.dial("/opsopen/work?worker=box-b", "")
	if got := k.claimTask(1)["id"]; got != held {
		t.Fatalf("socket on B claimed %v, want %s", got, held)
	}
	k.send(`{"type":"claim","ref":2}`)
	b.claimsWaiting("opsopen", 1)
	wantReply(t, "cancel on A", a.do("DELETE", "/opsopen/"+held, "", ``).JSON(t), map[string]any{"accepted": true, "status": "failed"})
	id := a.post("opsopen", "", `{"n":1}`)
	sql(t, url, `ALTER ROLE `+role+` LOGIN`) // A's listener comes back, and finds B
	got := map[string]any{}
	for range 2 {
		m := k.next()
		got[m["type"].(string)] = m["id"]
	}
	wantReply(t, "the socket on B", got, map[string]any{"cancelled": held, "task": id})
}

// onDatabase runs f on a connection of its own to the database at url,
// closed once f returns; any error ends the test.
func onDatabase(t *testing.T, url string, f func(context.Context, *pgx.Conn) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := f(ctx, conn); err != nil {
		t.Fatal(err)
	}
}

// sql runs stmt on the database at url.
func sql(t *testing.T, url, stmt string) {
	t.Helper()
	onDatabase(t, url, func(ctx context.Context, conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
		return nil
	})
}

// listenerPID is the pid of the one LISTEN session on the database.
func listenerPID(t *testing.T, url string) (pid int32) {
	t.Helper()
	onDatabase(t, url, func(ctx context.Context, conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE 'LISTEN %'`).Scan(&pid)
	})
	return pid
}

// terminate ends the session pid on the database at url.
func terminate(t *testing.T, url string, pid int32) {
	t.Helper()
	onDatabase(t, url, func(ctx context.Context, conn *pgx.Conn) error {
		var ok bool
		if err := conn.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&ok); err != nil || !ok {
			return fmt.Errorf("terminate %d: %v %v", pid, ok, err)
		}
		return nil
	})
}
