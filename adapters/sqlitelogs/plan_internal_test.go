package sqlitelogs

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/taskhoster/taskhoster/domain/tasklog"
)

// TestEventsPlansUseAnIndexInTimeOrder pins what keeps pages fast on a big
// store: every filter reads an index that already is in time order, so
// SQLite stops after one page instead of sorting every match ("USE TEMP
// B-TREE FOR ORDER BY") or scanning the table.
func TestEventsPlansUseAnIndexInTimeOrder(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	pos := &tasklog.Position{Millis: 1_751_500_000_000, Seq: 7}
	from := time.UnixMilli(1_751_000_000_000)
	cases := []struct {
		name  string
		q     tasklog.Query
		index string
	}{
		{"unfiltered", tasklog.Query{}, "lines_ms"},
		{"older page", tasklog.Query{Before: pos}, "lines_ms"},
		{"newer page", tasklog.Query{After: pos}, "lines_ms"},
		{"time range", tasklog.Query{Filter: tasklog.Filter{From: from, To: from.Add(time.Hour)}}, "lines_ms"},
		{"task id", tasklog.Query{Filter: tasklog.Filter{ID: "9f2c1a0b7d4e6f83"}}, "lines_id"},
		{"host", tasklog.Query{Filter: tasklog.Filter{Host: "task.example.com"}}, "lines_host"},
		{"queue", tasklog.Query{Filter: tasklog.Filter{Queue: "resize"}, Before: pos}, "lines_queue"},
		{"event", tasklog.Query{Filter: tasklog.Filter{Event: "result"}}, "lines_event"},
		{"error", tasklog.Query{Filter: tasklog.Filter{Error: "attempts"}}, "lines_error"},
		{"worker in a time range", tasklog.Query{Filter: tasklog.Filter{Worker: "box-1", From: from}}, "lines_worker"},
		{"event and queue", tasklog.Query{Filter: tasklog.Filter{Event: "result", Queue: "resize"}}, "lines_queue_event"},
		// A prefix reads a range of its column's index, then sorts what it
		// found by time: the one kind of filter that sorts.
		{"queue prefix", tasklog.Query{Filter: tasklog.Filter{Queue: "res*"}}, "lines_queue"},
		{"task id prefix", tasklog.Query{Filter: tasklog.Filter{ID: "9f2c*"}}, "lines_id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.q.Limit = tasklog.DefaultLimit
			query, args := eventsSQL(tc.q)
			plan := explain(t, s, query, args)
			_, prefix := tasklog.Prefix(tc.q.Filter.Queue + tc.q.Filter.ID)
			if (strings.Contains(plan, "TEMP B-TREE") && !prefix) || !strings.Contains(plan, "USING INDEX") {
				t.Errorf("plan sorts or scans:\n%s", plan)
			}
			t.Logf("%s", plan)
			if tc.index != "" && !slices.Contains(strings.Fields(plan), tc.index) {
				t.Errorf("plan does not use %s:\n%s", tc.index, plan)
			}
		})
	}
}

func explain(t *testing.T, s *Store, query string, args []any) string {
	t.Helper()
	rows, err := s.db.Query("EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		b.WriteString(detail + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
