package postgres_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/taskhoster/taskhoster/adapters/clock"
	"github.com/taskhoster/taskhoster/adapters/notify"
	"github.com/taskhoster/taskhoster/adapters/schema"
	"github.com/taskhoster/taskhoster/app"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/internal/pgtest"
)

// A batch post is one transaction: the database refusing its last task
// leaves none of it, no row and no event line, even when the database
// would refuse to delete what it stored (as when it has become
// unreachable). Stored one Create at a time, the tasks before the last
// were committed (and claimable), and with their deletes refused they
// stayed behind an answer that said the batch failed: the client's retry
// then left them twice.
func TestABatchTheDatabaseRefusesLeavesNothing(t *testing.T) {
	ctx := context.Background()
	url := pgtest.Database(t)
	s := mustOpen(t, url)
	s.WriteLines(app.StagedEvent)
	s.WriteBatchLines(app.StagedEvents)
	svc := app.New(app.Deps{
		Repo: s, Syncer: nopSyncer{}, Log: s.Log(), Notifier: notify.NewHub(),
		Clock: clock.System{}, Compiler: schema.Compiler{}, Pauses: s,
	})
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// The database refuses the task whose item says "poison", and every
	// delete of a task.
	if _, err := conn.Exec(ctx, `
		CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN RAISE EXCEPTION 'refused by the test'; END $$;
		CREATE TRIGGER refuse_poison BEFORE INSERT ON tasks FOR EACH ROW
			WHEN (position('poison' in convert_from(NEW.record, 'UTF8')) > 0) EXECUTE FUNCTION refuse();
		CREATE TRIGGER refuse_deletes BEFORE DELETE ON tasks FOR EACH ROW EXECUTE FUNCTION refuse();`); err != nil {
		t.Fatal(err)
	}
	q := testQueue(domain.DefaultSettings())
	items := [][]byte{[]byte(`{"url":"a"}`), []byte(`{"url":"b"}`), []byte(`{"url":"poison"}`)}
	if _, err := svc.PostBatch(ctx, q, "alice", items, app.PostOptions{}); err == nil {
		t.Fatal("a batch the database refused succeeded")
	}
	var rows, lines int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM tasks), (SELECT count(*) FROM event_lines)`).Scan(&rows, &lines); err != nil {
		t.Fatal(err)
	}
	if rows != 0 || lines != 0 {
		t.Errorf("a refused batch left %d rows and %d event lines, want none", rows, lines)
	}
	if n := svc.Counts(q); n.Pending != 0 {
		t.Errorf("a refused batch left %d tasks pending", n.Pending)
	}

	// A batch taken is stored whole, its posted lines with it, in order.
	tasks, err := svc.PostBatch(ctx, q, "alice", items[:2], app.PostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, task := range tasks {
		want = append(want, "posted "+task.ID)
	}
	var got []string
	r, err := conn.Query(ctx, `SELECT convert_from(line, 'UTF8')::jsonb->>'event', id FROM event_lines ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	for r.Next() {
		var kind, id string
		if err := r.Scan(&kind, &id); err != nil {
			t.Fatal(err)
		}
		got = append(got, kind+" "+id)
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("event lines of a batch (-want +got):\n%s", diff)
	}
}
