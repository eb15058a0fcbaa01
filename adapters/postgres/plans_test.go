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

// The statements that read tasks in an order read it from the index that
// holds that order, in the generic plan every connection keeps, whatever
// the planner thinks of the table: never analyzed, and analyzed while a
// few tasks waited. A plan that sorts instead reads every pending task at
// each claim.
func TestOrderedReadsUseTheirIndexes(t *testing.T) {
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
		index       string
	}
	claim := []any{ref.Host, ref.Queue, int64(0), []string{}, 1}
	pending := orderOf(domain.StagePending)
	pendingPage, pageArgs := pageQuery(ref, domain.StagePending, "", pending, false, &position{at: 0, id: "x"}, 10)
	newestPage, newestArgs := pageQuery(ref, domain.StagePending, "", pending, true, nil, 10)
	statements := []statement{
		{"a batch's claims", claimRows, claim, "tasks_claim"},
		{"the count of claimable tasks", countClaimable, claim, "tasks_claim"},
		{"claim candidates", candidatesQuery(false, nil), claim[:3], "tasks_claim"},
		{"a page of pending tasks", pendingPage, pageArgs, "tasks_pending"},
		{"the newest pending tasks", newestPage, newestArgs, "tasks_pending"},
	}
	check := func(when string) {
		for _, st := range statements {
			plan := genericPlan(t, s.pool, st.query, st.args)
			if !strings.Contains(plan, "using "+st.index) || strings.Contains(plan, "Sort") {
				t.Errorf("%s, %s: the plan does not read %s in order:\n%s", st.name, when, st.index, plan)
			}
		}
	}
	check("on a new table")

	// A queue's life in rows: batches of tasks posted, most of each
	// claimed and finished, a few left pending. Every change leaves a dead
	// entry in each index of pending tasks, and once the wider index of
	// claims outgrew the other, a planner without statistics took the
	// narrower one and a sort.
	const steps, batch = 8, 3000
	for step := range steps {
		if _, err := s.pool.Exec(ctx, `INSERT INTO tasks (host, queue, id, status, stage, priority, eligible_at, posted_at, record)
			SELECT $1, $2, $3 || g, 'pending', 0, 0, $4::int8 + g, $4::int8 + g, convert_to(repeat('x', 300), 'UTF8') FROM generate_series(1, $5::int) g`,
			ref.Host, ref.Queue, fmt.Sprintf("s%d-", step), int64(step*batch), batch); err != nil {
			t.Fatal(err)
		}
		for _, status := range []domain.Status{domain.Processing, domain.Finished} {
			if _, err := s.pool.Exec(ctx, `UPDATE tasks SET status = $1, stage = $2 WHERE id LIKE $3 AND right(id, 1) <> '7' AND stage < $2`,
				string(status), int16(status.Stage()), fmt.Sprintf("s%d-%%", step)); err != nil {
				t.Fatal(err)
			}
		}
		check(fmt.Sprintf("never analyzed, after %d batches", step+1))
	}
	// All but three finished, and the statistics taken: before and after
	// the table's vacuum.
	if _, err := s.pool.Exec(ctx, `UPDATE tasks SET status = 'finished', stage = 2 WHERE stage = 0 AND id NOT IN ('s0-7', 's0-17', 's0-27')`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `ANALYZE tasks`); err != nil {
		t.Fatal(err)
	}
	check("analyzed with three tasks pending")
	if _, err := s.pool.Exec(ctx, `VACUUM ANALYZE tasks`); err != nil {
		t.Fatal(err)
	}
	check("vacuumed with three tasks pending")
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
