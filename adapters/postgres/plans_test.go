package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/internal/pgtest"
)

// The statements that read pending tasks read them from the index made
// for each, in the generic plan every connection keeps, whatever the
// planner thinks of the table: new, through a queue's life without
// statistics, analyzed as the queue ran dry, vacuumed, and emptied after
// statistics of a run with no delayed task. A plan that takes another
// index reads every pending task of the queue, at each claim.
func TestReadsOfPendingTasksUseTheirIndexes(t *testing.T) {
	s, err := Open(context.Background(), pgtest.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	ref := domain.QueueRef{Host: "task.example.com", Queue: "resize"}
	type statement struct {
		name, query string
		args        []any
		indexes     []string // each read, and no sort
	}
	claim := []any{ref.Host, ref.Queue, int64(0), []string{}, 1}
	pending := orderOf(domain.StagePending)
	pendingPage, pageArgs := pageQuery(ref, domain.StagePending, "", pending, false, &position{at: 0, id: "x"}, 10)
	newestPage, newestArgs := pageQuery(ref, domain.StagePending, "", pending, true, nil, 10)
	statements := []statement{
		{"a batch's claims", claimRows, claim, []string{"tasks_claim"}},
		{"a batch's claims with the count come due", claimDueRows, append(claim, int64(0)), []string{"tasks_delayed", "tasks_claim"}},
		{"the count of claimable tasks", countClaimable, claim, []string{"tasks_claim"}},
		{"claim candidates", candidatesQuery(false, nil), claim[:3], []string{"tasks_claim"}},
		{"the count come due", `SELECT count(*) FROM tasks WHERE ` + dueBetween, []any{ref.Host, ref.Queue, int64(0), int64(0)}, []string{"tasks_delayed"}},
		{"the next to come due", nextDueSQL, []any{ref.Host, ref.Queue, int64(0)}, []string{"tasks_delayed"}},
		{"a page of pending tasks", pendingPage, pageArgs, []string{"tasks_pending"}},
		{"the newest pending tasks", newestPage, newestArgs, []string{"tasks_pending"}},
	}
	check := func(when string) {
		for _, st := range statements {
			plan := genericPlan(t, s.pool, st.query, st.args)
			for _, index := range st.indexes {
				if !strings.Contains(plan, "using "+index) || strings.Contains(plan, "Sort") {
					t.Errorf("%s, %s: the plan does not read %s (in order):\n%s", st.name, when, index, plan)
				}
			}
		}
	}
	exec := func(query string, args ...any) {
		t.Helper()
		if _, err := s.pool.Exec(ctx, query, args...); err != nil {
			t.Fatal(err)
		}
	}
	check("on a new table")

	// A queue's life in rows: batches of tasks posted, most of each
	// claimed and finished, a few left pending. Every change leaves a dead
	// entry in each index of pending tasks, and once the wider index of
	// claims outgrew the other, a planner without statistics took the
	// narrower one and a sort.
	const steps, batch = 8, 3000
	post := func(prefix string, from int64) {
		exec(`INSERT INTO tasks (host, queue, id, status, stage, priority, eligible_at, posted_at, record)
			SELECT $1, $2, $3 || g, 'pending', 0, 0, $4::int8 + g, $4::int8 + g, convert_to(repeat('x', 300), 'UTF8') FROM generate_series(1, $5::int) g`,
			ref.Host, ref.Queue, prefix, from, batch)
	}
	life := func(when string) {
		for step := range steps {
			prefix := fmt.Sprintf("%s%d-", when[:1], step)
			post(prefix, int64(step*batch))
			for _, status := range []domain.Status{domain.Processing, domain.Finished} {
				exec(`UPDATE tasks SET status = $1, stage = $2 WHERE id LIKE $3 AND right(id, 1) <> '7' AND stage < $2`,
					string(status), int16(status.Stage()), prefix+"%")
			}
			check(fmt.Sprintf("%s, after %d batches", when, step+1))
		}
	}
	life("never analyzed")

	// All but three finished, and the statistics taken: before and after
	// the table's vacuum.
	exec(`UPDATE tasks SET status = 'finished', stage = 2 WHERE stage = 0 AND id NOT IN ('n0-7', 'n0-17', 'n0-27')`)
	exec(`ANALYZE tasks`)
	check("analyzed with three tasks pending")
	exec(`VACUUM ANALYZE tasks`)
	check("vacuumed with three tasks pending")

	// Statistics of a finished run with no delayed task, kept through
	// TRUNCATE, and a new run's tasks posted.
	exec(`UPDATE tasks SET status = 'finished', stage = 2 WHERE stage = 0`)
	exec(`ANALYZE tasks`)
	exec(`TRUNCATE tasks`)
	check("emptied after statistics of a run")
	life("emptied after statistics of a run")
}

// genericPlan is EXPLAIN's text of the generic plan of query run with
// args, on one of pool's connections (with its session settings).
func genericPlan(t *testing.T, pool *pgxpool.Pool, query string, args []any) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `PREPARE plan_probe AS `+query); err != nil {
		t.Fatalf("prepare %s: %v", query, err)
	}
	defer conn.Exec(ctx, `DEALLOCATE plan_probe`)
	// EXECUTE's arguments as literals: a utility statement takes no
	// parameters.
	lits := make([]string, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case string:
			lits[i] = "'" + strings.ReplaceAll(v, "'", "''") + "'"
		case []string:
			lits[i] = "'{" + strings.Join(v, ",") + "}'" // plain ids only
		default:
			lits[i] = fmt.Sprint(v)
		}
	}
	rows, err := conn.Query(ctx, `EXPLAIN EXECUTE plan_probe(`+strings.Join(lits, ", ")+`)`)
	if err != nil {
		t.Fatalf("explain %s: %v", query, err)
	}
	defer rows.Close()
	var plan strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(line + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan.String()
}
