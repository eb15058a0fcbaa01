package faults

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"math/rand/v2"

	"github.com/jackc/pgx/v5"

	"github.com/taskhoster/taskhoster/internal/pgtest"
)

// defaultPostgresCycles keeps TestFaultsPostgres short in `make test`;
// FAULT_CYCLES sets it as for TestFaults.
const defaultPostgresCycles = 3

// TestFaultsPostgres is TestFaults on PostgreSQL (issue 14): two servers
// on one database, each with folders of its own (the hosts folder is the
// same configuration, the logs folder its own event log) and a port of its
// own, the clients dealt out over both. Each cycle kills one of the two at
// random, in the same ways as TestFaults (SIGKILL; sometimes during a
// clean shutdown; sometimes again in its start-up), while the other keeps
// serving, and restarts it. The store the checker reads is the database's
// tasks table; the event log is both servers' day files, merged by time
// (see mergeLogs). The invariants are TestFaults's: nothing acknowledged
// lost, nothing finished twice, no claim before its time, none over
// maxAttempts, and the rest of check.
//
// What is relaxed, and why, all for the log being per server (another
// change moves it into the database, where none of this is needed):
//   - Each server's start-up repair judges its own day files against the
//     shared store, so it appends lines for the other server's recent
//     changes (a server bug: TestPostgresRepairLogsAnotherServersChanges).
//     The lines a server appended between its spawn and its listening are
//     its start-up's; those the other server's log also holds (same task,
//     same time stamp) are left out (dropForeignMends). Mends of its own
//     cut lines stay, and count as check's mended.
//   - So the log is checked as unsettled (check's settled=false): a
//     repair cannot be trusted to mend every cut line of a task another
//     server has changed since, so up to maxInFlight lines per kill may
//     stay cut, as between a kill and the next start on the files.
//   - For the same reason a problem naming a task that has a kept mend and
//     lines in both logs is logged, not failed (splitTasks).
//   - Lines from two logs are ordered by time stamp, ties by lifecycle
//     rank (mergeLogs); a pause set through one server reaches the other
//     within the store's pause cache's 1 s (adapters/postgres pauseTTL),
//     so claims there are allowed that much longer (checkOptions).
//
// The counters of the promise — lost, double-finished, early,
// over-attempts, twins, phantoms, unfinished — are judged by the store and
// the clients as on the files, for every task but the few relaxed ones.
func TestFaultsPostgres(t *testing.T) {
	bin, ok := pgtest.BinDir()
	if !ok {
		t.Skip("TestFaultsPostgres skipped: " + pgtest.NotInstalled)
	}
	cycles, seed := config(t)
	if os.Getenv("FAULT_CYCLES") == "" {
		cycles = defaultPostgresCycles
	}
	rng := rand.New(rand.NewPCG(seed, 0))
	cluster, err := pgtest.Start(bin)
	if err != nil {
		t.Fatalf("start PostgreSQL: %v", err)
	}
	t.Cleanup(cluster.Stop)
	url := cluster.URL("postgres")

	var rs [2]*runner
	var apis []*api
	for i := range rs {
		f := newFolders(t)
		f.extra = []string{"--store", "postgres", "--database-url", url}
		rs[i] = &runner{t: t, folders: f, port: freePort(t), errors: map[string]int{}}
		t.Cleanup(rs[i].killCurrent)
		rs[i].start()
		apis = append(apis, newAPI(rs[i].port))
	}
	cl := startClients(apis...)
	t.Cleanup(cl.abort)

	kills, startupKills, shutdownKills := 0, 0, 0
	killedOf := [2]int{}
	for range cycles {
		time.Sleep(minRun + time.Duration(rng.Int64N(int64(maxRun-minRun))))
		which := rng.IntN(len(rs))
		r := rs[which]
		killedOf[which]++
		k := r.killAtRandom(rng)
		kills, startupKills, shutdownKills = kills+k.kills, startupKills+k.startup, shutdownKills+k.shutdown
		r.start()
	}

	if !cl.stopProducers(clientStopLimit) {
		t.Fatal("producers did not stop")
	}
	if !cl.manager.toggle(nil, opResume) {
		t.Fatal("could not resume the ops queue")
	}
	rs[0].drain(apis[0], drainLimit)
	if !cl.stopWorkers(clientStopLimit) {
		t.Fatal("workers did not stop")
	}
	for _, r := range rs {
		if err := r.current.stop(time.Minute); err != nil {
			t.Fatal(err)
		}
		r.absorb(r.current)
	}
	st, err := readDatabase(url)
	if err != nil {
		t.Fatal(err)
	}
	// The event log is the database's: each line was written in its
	// change's transaction, so none can be cut and no server repairs one.
	events, torn, err := readDatabaseLog(url)
	if err != nil {
		t.Fatal(err)
	}
	// A pause set through one server reaches the other within the
	// PostgreSQL store's pause cache's time to live (adapters/postgres
	// pauseTTL, 1 s): claims there until then are by design.
	opts := checkOptions{pauseSlack: pauseSlack + 1000}
	// A claim's stamp is the database's time as its server measured it;
	// a delayed post's earliest claim is the client's clock plus the delay.
	// On one machine the two clocks are one, but each server's measure of
	// it is off by up to the bound it logged.
	var bound time.Duration
	for _, r := range rs {
		bound = max(bound, r.clockBound)
	}
	opts.clockSlack = int64((bound + time.Millisecond - 1) / time.Millisecond) // whole ms, rounded up
	t.Logf("the servers' clock: error bound at most %v", bound)
	rep := checkWith(opts, cl.histories(), st, runQueues, events, torn, kills, nil, true)
	rep.Seed, rep.Cycles, rep.StartupKills, rep.ShutdownKills = seed, cycles, startupKills, shutdownKills
	t.Logf("postgres, two servers (kills of each: %d, %d): %s", killedOf[0], killedOf[1], rep.Summary())
	for _, r := range rs {
		r.logServerErrors()
	}
	for i, p := range rep.Problems {
		if i == maxProblemLines {
			t.Errorf("... and more problems")
			break
		}
		t.Error(p)
	}
}

// readDatabaseLog reads the run's event lines from the database, in the
// order the log API serves them (lines no reader has placed yet come last,
// in the order they were written).
func readDatabaseLog(url string) (events []event, torn int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, 0, fmt.Errorf("connect to read the log: %w", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT line FROM event_lines WHERE host = $1 ORDER BY day, off NULLS LAST, seq`, host)
	if err != nil {
		return nil, 0, fmt.Errorf("read the log: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var line []byte
		if err := rows.Scan(&line); err != nil {
			return nil, 0, err
		}
		ev, ok, ours := parseLine(bytes.TrimSuffix(line, []byte("\n")))
		switch {
		case !ok:
			torn++
		case ours:
			events = append(events, ev)
		}
	}
	return events, torn, rows.Err()
}

// readDatabase reads every task of the run's queues from the tasks table:
// the record is the JSON a task file holds, and the stage says which
// state folder it would be in. Nothing there can be debris.
func readDatabase(url string) (store, error) {
	s := store{tasks: map[string]storedTask{}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return s, fmt.Errorf("connect to read the tasks: %w", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT queue, id, stage, record FROM tasks WHERE host = $1`, host)
	if err != nil {
		return s, fmt.Errorf("read the tasks: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var queue, id string
		var stage int16
		var record []byte
		if err := rows.Scan(&queue, &id, &stage, &record); err != nil {
			return s, err
		}
		if _, ours := runQueues[queue]; !ours {
			continue
		}
		state := [...]string{"pending", "processing", "done"}[min(max(int(stage), 0), 2)]
		t, ok := parseTask(record, id, queue, state)
		if !ok {
			s.debris = append(s.debris, fmt.Sprintf("tasks row %s/%s: unreadable record", queue, id))
			continue
		}
		s.tasks[id] = t
	}
	return s, rows.Err()
}
