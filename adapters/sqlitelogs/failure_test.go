package sqlitelogs_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/adapters/sqlitelogs"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/domain/tasklog"
)

// TestFailuresAreStoredAndFiltered: the events of SPEC §11 and the error
// code a line tells are kept, filtered by, and in the trail.
func TestFailuresAreStoredAndFiltered(t *testing.T) {
	s := mustOpen(t)
	withError := func(code string) func(*tasklog.Line) {
		return func(l *tasklog.Line) { l.Error, l.Status, l.Bytes.Error = code, domain.Failed, 19 }
	}
	mustCommit(t, s, tasklog.Cursor{Offset: 800},
		line(0, 1, domain.EventPosted),
		line(100, 1, domain.EventReleased, func(l *tasklog.Line) { l.Bytes.Error = 45; l.Archived = []string{"error"} }),
		line(200, 1, domain.EventFailed, withError(domain.AttemptsError)),
		line(300, 2, domain.EventFailed, withError(domain.FailedError)),
		line(400, 3, domain.EventTimeout, withError(domain.TimeoutError)),
		line(500, 4, domain.EventResult),
		line(600, 5, domain.EventCancelled, withError(domain.CancelledError)),
		line(650, 5, domain.EventRetried))

	for _, tc := range []struct {
		name string
		f    tasklog.Filter
		want []int64
	}{
		{"released", tasklog.Filter{Event: domain.EventReleased}, []int64{100}},
		{"failed", tasklog.Filter{Event: domain.EventFailed}, []int64{300, 200}},
		{"dead letters", tasklog.Filter{Error: domain.AttemptsError}, []int64{200}},
		{"timeouts by their code", tasklog.Filter{Error: domain.TimeoutError}, []int64{400}},
		{"cancelled", tasklog.Filter{Event: domain.EventCancelled}, []int64{600}},
		{"cancelled by their code", tasklog.Filter{Error: domain.CancelledError}, []int64{600}},
		{"retried", tasklog.Filter{Event: domain.EventRetried}, []int64{650}},
		{"failed by a worker in one queue", tasklog.Filter{Error: domain.FailedError, Queue: "resize", Event: domain.EventFailed}, []int64{300}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, offsets(all(t, s, tc.f))); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}

	trail, err := s.Trail(context.Background(), "task.example.com", "resize", "0000000000000001")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range trail {
		got = append(got, string(l.Event)+":"+l.Error)
	}
	if diff := cmp.Diff([]string{"posted:", "released:", "failed:attempts"}, got); diff != "" {
		t.Errorf("trail (-want +got):\n%s", diff)
	}
	if trail[1].Bytes.Error != 45 || trail[2].Bytes.Error != 19 {
		t.Errorf("error sizes %d, %d", trail[1].Bytes.Error, trail[2].Bytes.Error)
	}

	trail, err = s.Trail(context.Background(), "task.example.com", "resize", "0000000000000005")
	if err != nil {
		t.Fatal(err)
	}
	got = nil
	for _, l := range trail {
		got = append(got, string(l.Event)+":"+l.Error+":"+string(l.Status))
	}
	if diff := cmp.Diff([]string{"cancelled:cancelled:failed", "retried::pending"}, got); diff != "" {
		t.Errorf("trail of the cancelled task (-want +got):\n%s", diff)
	}
}

// TestOpenBringsAVersion1StoreUpToDate: a store written before the error
// column gets it, filled from the lines it holds.
func TestOpenBringsAVersion1StoreUpToDate(t *testing.T) {
	dir := t.TempDir()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, sqlitelogs.File))
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		`CREATE TABLE lines (seq INTEGER PRIMARY KEY, source TEXT NOT NULL, day TEXT NOT NULL,
			off INTEGER NOT NULL, ms INTEGER NOT NULL, t INTEGER NOT NULL, host TEXT NOT NULL,
			queue TEXT NOT NULL, id TEXT NOT NULL, event TEXT NOT NULL, status TEXT NOT NULL,
			attempts INTEGER NOT NULL, worker TEXT, b_item INTEGER NOT NULL, b_progress INTEGER NOT NULL,
			b_result INTEGER NOT NULL, b_error INTEGER NOT NULL, archived TEXT NOT NULL, raw TEXT NOT NULL,
			UNIQUE (source, day, off)) STRICT`,
		`INSERT INTO lines VALUES
			(1, 's', '2026-07-26', 0, 1000, 1, 'h', 'q', '0000000000000001', 'failed', 'failed', 2, 'w', 0, 0, 0, 10, '',
				'{"t":1,"host":"h","queue":"q","id":"0000000000000001","event":"failed","status":"failed","error":"attempts"}'),
			(2, 's', '2026-07-26', 90, 2000, 2, 'h', 'q', '0000000000000002', 'timeout', 'failed', 1, NULL, 0, 0, 0, 9, '',
				'{"t":2,"host":"h","queue":"q","id":"0000000000000002","event":"timeout","status":"failed"}'),
			(3, 's', '2026-07-26', 180, 3000, 3, 'h', 'q', '0000000000000003', 'result', 'finished', 1, 'w', 0, 0, 2, 0, '',
				'{"t":3,"host":"h","queue":"q","id":"0000000000000003","event":"result","status":"finished"}')`,
		`PRAGMA user_version = 1`,
	} {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := sqlitelogs.OpenReader(dir); err == nil {
		t.Errorf("a reader opened a version 1 store as if it were new")
	}

	s, err := sqlitelogs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got []string
	for _, l := range all(t, s, tasklog.Filter{}) {
		got = append(got, string(l.Event)+":"+l.Error)
	}
	if diff := cmp.Diff([]string{"result:", "timeout:timeout", "failed:attempts"}, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int64{0}, offsets(all(t, s, tasklog.Filter{Error: "attempts"}))); diff != "" {
		t.Errorf("dead letters (-want +got):\n%s", diff)
	}
}
