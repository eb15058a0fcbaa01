package e2e

import (
	"os"
	"testing"

	"github.com/taskhoster/taskhoster/internal/pgtest"
)

// Known server bug (issue 14, found by tests/faults TestFaultsPostgres):
// with two servers on one database and the event log in each server's own
// day files, a server's start-up repair (app.Service.RepairLog, run from
// cmd/taskhoster/server ServiceModule) reads its own log against the
// shared store's recent changes, takes every change another server made in
// the last seconds (repairRecent, 10 s) for one its own crash cut, and
// appends a line for it: the combined log then has two posted lines (or
// results, claims...) for one change, the repaired one naming the wrong
// worker or none, and a retry repaired as a post. The fix belongs with the
// log moving into the database (the line in the transaction of its change,
// nothing to repair); until then the repair must not run, or must only
// consider changes this server made, on a shared store.
//
// Skipped while the bug stands; TASKHOSTER_KNOWN_BUGS=1 runs it.
func TestPostgresRepairLogsAnotherServersChanges(t *testing.T) {
	if os.Getenv("TASKHOSTER_KNOWN_BUGS") == "" {
		t.Skip("known bug: a server's start-up repair logs another server's changes as its own cut lines (set TASKHOSTER_KNOWN_BUGS=1 to run)")
	}
	url := pgtest.Database(t)
	a := start(t, newDirs(t), "--store", "postgres", "--database-url", url)
	bDirs := newDirs(t)
	b := start(t, bDirs, "--store", "postgres", "--database-url", url)

	id := a.post("resize", aliceToken, `{"url":"https://ex.com/a.png"}`)
	b.kill()
	b = start(t, bDirs, "--store", "postgres", "--database-url", url)
	if got := a.eventsOf(id); len(got) != 1 || got[0] != "posted" {
		t.Fatalf("A's log for %s = %v, want [posted]", id, got)
	}
	if got := b.eventsOf(id); len(got) != 0 {
		t.Errorf("B, restarted, logged %v for task %s, which A posted and logged: a change of another server repaired as a cut line", got, id)
	}
}
