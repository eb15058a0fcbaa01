package sqlitelogs_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/domain/tasklog"
)

// TestPrefixCountNamesLatest: filters by prefix, counts of what a filter
// matches, the hosts and queues named, and the newest line's number.
func TestPrefixCountNamesLatest(t *testing.T) {
	s := mustOpen(t)
	ctx := context.Background()
	if seq, err := s.Latest(ctx); err != nil || seq != 0 {
		t.Errorf("empty store: latest %d, %v", seq, err)
	}
	in := func(q string, worker string) func(*tasklog.Line) {
		return func(l *tasklog.Line) { l.Queue, l.Worker = q, worker }
	}
	mustCommit(t, s, tasklog.Cursor{Offset: 100},
		line(1, 0xab01, domain.EventPosted, in("resize", "")),
		line(2, 0xab02, domain.EventPosted, in("resize-big", "")),
		line(3, 0xcd03, domain.EventPosted, in("thumbnail", "")),
		line(4, 0xab01, domain.EventClaimed, in("resize", "box-1")),
		line(5, 0xcd03, domain.EventClaimed, in("thumbnail", "box-2")),
		line(6, 0xab02, domain.EventClaimed, in("resize-big", "cpu")),
	)
	ids := func(f tasklog.Filter) []int64 {
		t.Helper()
		page, err := s.Events(ctx, tasklog.Query{Filter: f, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		var offs []int64
		for _, l := range page.Lines {
			offs = append(offs, l.Key.Offset)
		}
		n, more, err := s.Count(ctx, f)
		if err != nil || more || n != len(offs) {
			t.Errorf("%+v: count %d (more %v, %v), the list has %d", f, n, more, err, len(offs))
		}
		return offs
	}
	for name, c := range map[string]struct {
		f    tasklog.Filter
		want []int64
	}{
		"queue exactly":    {tasklog.Filter{Queue: "resize"}, []int64{4, 1}},
		"queue prefix":     {tasklog.Filter{Queue: "res*"}, []int64{6, 4, 2, 1}},
		"whole name, *":    {tasklog.Filter{Queue: "resize*"}, []int64{6, 4, 2, 1}},
		"id prefix":        {tasklog.Filter{ID: "000000000000ab*"}, []int64{6, 4, 2, 1}},
		"worker prefix":    {tasklog.Filter{Worker: "box*"}, []int64{5, 4}},
		"host prefix":      {tasklog.Filter{Host: "task.*", Queue: "th*"}, []int64{5, 3}},
		"everything, *":    {tasklog.Filter{Host: "*"}, []int64{6, 5, 4, 3, 2, 1}},
		"no such prefix":   {tasklog.Filter{Queue: "zz*"}, nil},
		"prefix and exact": {tasklog.Filter{Queue: "res*", Event: domain.EventClaimed}, []int64{6, 4}},
	} {
		if diff := cmp.Diff(c.want, ids(c.f)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
	for _, bad := range []tasklog.Filter{{Queue: "Res*"}, {ID: "xyz*"}, {Host: "a/b*"}, {Queue: "a*b"}} {
		if _, _, err := s.Count(ctx, bad); domain.KindOf(err) != domain.KindInvalid {
			t.Errorf("%+v: %v, want invalid", bad, err)
		}
	}
	hosts, queues, err := s.Names(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"task.example.com"}, hosts); diff != "" {
		t.Errorf("hosts (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"resize", "resize-big", "thumbnail"}, queues); diff != "" {
		t.Errorf("queues (-want +got):\n%s", diff)
	}
	if seq, err := s.Latest(ctx); err != nil || seq != 6 {
		t.Errorf("latest %d, %v; want 6", seq, err)
	}
}
