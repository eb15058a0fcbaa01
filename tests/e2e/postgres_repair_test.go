package e2e

import (
	"testing"

	"github.com/taskhoster/taskhoster/internal/pgtest"
)

// A server that restarts on a shared database adds no event line for
// another server's changes. (With the log in each server's day files, a
// restart's repair took the other server's recent changes for lines its own
// crash cut and logged them again; found by TestFaultsPostgres.) The log now
// lives in the database, written in each change's transaction: nothing can
// be cut, and nothing is repaired there.
func TestPostgresRestartLogsNoOtherServersChanges(t *testing.T) {
	url := pgtest.Database(t)
	a := start(t, newDirs(t), "--store", "postgres", "--database-url", url)
	bDirs := newDirs(t)
	b := start(t, bDirs, "--store", "postgres", "--database-url", url)
	id := a.post("resize", aliceToken, `{"url":"https://ex.com/a.png"}`)
	b.kill()
	b = start(t, bDirs, "--store", "postgres", "--database-url", url)
	for name, s := range map[string]*server{"A": a, "B": b} {
		if got := s.eventsOf(id); len(got) != 1 || got[0] != "posted" {
			t.Errorf("the log read through %s for %s = %v, want one posted line", name, id, got)
		}
	}
}
