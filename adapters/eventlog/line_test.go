package eventlog_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/adapters/eventlog"
	"github.com/taskhoster/taskhoster/domain"
)

// t0 is the seed example's "at"; its Unix seconds are 1785056812.
var t0 = time.Date(2026, 7, 26, 9, 6, 52, 4_000_000, time.UTC)

const day0 = "2026-07-26"

// lifecycle walks one task through every transition the domain makes and
// returns the events, keyed by a case name.
func lifecycle(tb testing.TB) map[string]domain.Event {
	tb.Helper()
	sec := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }
	must := func(t domain.Task, ev domain.Event, err error) (domain.Task, domain.Event) {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
		return t, ev
	}
	evs := map[string]domain.Event{}

	a, ev := domain.Post("9f2c1a0b7d4e6f83", "task.example.com", "resize",
		json.RawMessage(`{"url":"https://ex.com/a.png"}`), "alice", sec(0))
	evs["posted"] = ev
	a, evs["claimed"] = must(a.Claim("box-1", time.Minute, sec(1)))
	a, evs["progress"] = must(a.ReportProgress("box-1", json.RawMessage(`{"percent":40}`), time.Minute, sec(2)))
	a, evs["requeue"] = must(a.Requeue(domain.CauseLease, domain.Retry{}, sec(3)))
	a, evs["claimed again"] = must(a.Claim("box-2", time.Minute, sec(4)))
	a, evs["result"] = must(a.Finish("box-2", json.RawMessage(`{"ok":true}`), sec(5)))
	a, ev, ok := a.Fetch(sec(6))
	if !ok {
		tb.Fatal("fetch of a finished task changed nothing")
	}
	evs["fetched"] = ev
	evs["cleaned"] = a.Clean(sec(7))

	b, _ := domain.Post("3a71bd0c5e2f9481", "task.example.com", "resize",
		json.RawMessage(`{"url":"https://ex.com/b.png"}`), "", sec(0))
	b, _ = must(b.Claim("box-1", time.Minute, sec(1)))
	_, evs["timeout"] = must(b.Timeout(sec(8)))

	// A corrupt file: the store knows only its name.
	corrupt := "corrupt"
	evs["failed"] = domain.Event{Kind: domain.EventFailed, At: sec(9), Task: domain.Task{
		ID: "18c4e05a9f2b7d63", Host: "task.example.com", Queue: "resize",
		Status: domain.Failed, Error: &corrupt,
	}}

	// Cancelled under a claim, then retried (SPEC §12).
	d, _ := domain.Post("5e0d9c2b4a7f1836", "task.example.com", "resize",
		json.RawMessage(`{"url":"https://ex.com/d.png"}`), "", sec(0))
	d, _ = must(d.Claim("box-3", time.Minute, sec(1)))
	d, evs["cancelled"] = must(d.Cancel(sec(10)))
	_, evs["retried"] = must(d.Retry(sec(11)))
	return evs
}

func TestAppendWritesExactLine(t *testing.T) {
	evs := lifecycle(t)
	tests := []struct {
		name string
		want string
	}{
		{"posted", `{"t":1785056812,"at":"2026-07-26T09:06:52.004Z","host":"task.example.com","queue":"resize","id":"9f2c1a0b7d4e6f83","event":"posted","status":"pending","attempts":0,"worker":null,"bytes":{"item":30,"progress":0,"result":0,"error":0},"archived":[]}`},
		{"claimed", `{"t":1785056813,"at":"2026-07-26T09:06:53.004Z","host":"task.example.com","queue":"resize","id":"9f2c1a0b7d4e6f83","event":"claimed","status":"processing","attempts":1,"worker":"box-1","bytes":{"item":30,"progress":0,"result":0,"error":0},"archived":[]}`},
		{"progress", `{"t":1785056814,"at":"2026-07-26T09:06:54.004Z","host":"task.example.com","queue":"resize","id":"9f2c1a0b7d4e6f83","event":"progress","status":"processing","attempts":1,"worker":"box-1","bytes":{"item":30,"progress":14,"result":0,"error":0},"archived":[]}`},
		{"requeue", `{"t":1785056815,"at":"2026-07-26T09:06:55.004Z","host":"task.example.com","queue":"resize","id":"9f2c1a0b7d4e6f83","event":"requeue","status":"pending","attempts":1,"worker":"box-1","bytes":{"item":30,"progress":14,"result":0,"error":0},"archived":[]}`},
		{"claimed again", `{"t":1785056816,"at":"2026-07-26T09:06:56.004Z","host":"task.example.com","queue":"resize","id":"9f2c1a0b7d4e6f83","event":"claimed","status":"processing","attempts":2,"worker":"box-2","bytes":{"item":30,"progress":14,"result":0,"error":0},"archived":[]}`},
		{"result", `{"t":1785056817,"at":"2026-07-26T09:06:57.004Z","host":"task.example.com","queue":"resize","id":"9f2c1a0b7d4e6f83","event":"result","status":"finished","attempts":2,"worker":"box-2","bytes":{"item":30,"progress":14,"result":11,"error":0},"archived":[]}`},
		{"fetched", `{"t":1785056818,"at":"2026-07-26T09:06:58.004Z","host":"task.example.com","queue":"resize","id":"9f2c1a0b7d4e6f83","event":"fetched","status":"finished","attempts":2,"worker":null,"bytes":{"item":30,"progress":14,"result":11,"error":0},"archived":[]}`},
		{"cleaned", `{"t":1785056819,"at":"2026-07-26T09:06:59.004Z","host":"task.example.com","queue":"resize","id":"9f2c1a0b7d4e6f83","event":"cleaned","status":"finished","attempts":2,"worker":null,"bytes":{"item":30,"progress":14,"result":11,"error":0},"archived":[]}`},
		{"timeout", `{"t":1785056820,"at":"2026-07-26T09:07:00.004Z","host":"task.example.com","queue":"resize","id":"3a71bd0c5e2f9481","event":"timeout","status":"failed","attempts":1,"worker":"box-1","bytes":{"item":30,"progress":0,"result":0,"error":9},"archived":[]}`},
		// A failed line carries the task's error code (SPEC §8, §6); the
		// other lines are the seed's.
		{"failed", `{"t":1785056821,"at":"2026-07-26T09:07:01.004Z","host":"task.example.com","queue":"resize","id":"18c4e05a9f2b7d63","event":"failed","status":"failed","error":"corrupt","attempts":0,"worker":null,"bytes":{"item":0,"progress":0,"result":0,"error":9},"archived":[]}`},
		// A cancelled line is the seed's (only a failed line carries
		// "error", SPEC §8: the event names the cause) and names the worker
		// that held the lease; a retried line is the task back to pending
		// with a fresh budget.
		{"cancelled", `{"t":1785056822,"at":"2026-07-26T09:07:02.004Z","host":"task.example.com","queue":"resize","id":"5e0d9c2b4a7f1836","event":"cancelled","status":"failed","attempts":1,"worker":"box-3","bytes":{"item":30,"progress":0,"result":0,"error":11},"archived":[]}`},
		{"retried", `{"t":1785056823,"at":"2026-07-26T09:07:03.004Z","host":"task.example.com","queue":"resize","id":"5e0d9c2b4a7f1836","event":"retried","status":"pending","attempts":0,"worker":null,"bytes":{"item":30,"progress":0,"result":0,"error":0},"archived":[]}`},
	}
	if len(tests) != len(evs) {
		t.Fatalf("%d cases for %d events", len(tests), len(evs))
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := mustOpen(t, dir)
			// Without the archive every line lists nothing (archive_test.go
			// has the lines of an archiving queue).
			if err := l.Append(context.Background(), evs[tc.name], false); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{tc.want}, readLines(t, dayFile(dir, day0))); diff != "" {
				t.Errorf("day file (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAppendTimeFields(t *testing.T) {
	evs := lifecycle(t)
	tests := []struct {
		name     string
		at       time.Time
		wantDay  string
		wantT    string
		wantAt   string
		wantFile string
	}{
		{
			name:    "milliseconds truncated, not rounded, like t",
			at:      time.Date(2026, 7, 26, 23, 59, 59, 999_999_999, time.UTC),
			wantDay: "2026-07-26", wantT: "1785110399", wantAt: "2026-07-26T23:59:59.999Z",
		},
		{
			name:    "whole second keeps three digits",
			at:      time.Date(2026, 7, 26, 10, 0, 0, 0, time.UTC),
			wantDay: "2026-07-26", wantT: "1785060000", wantAt: "2026-07-26T10:00:00.000Z",
		},
		{
			name:    "another zone is written in UTC, in the UTC day's file",
			at:      time.Date(2026, 7, 27, 1, 30, 0, 5_000_000, time.FixedZone("CEST", 2*3600)),
			wantDay: "2026-07-26", wantT: "1785108600", wantAt: "2026-07-26T23:30:00.005Z",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := mustOpen(t, dir)
			ev := evs["posted"]
			ev.At = tc.at
			if err := l.Append(context.Background(), ev, false); err != nil {
				t.Fatal(err)
			}
			want := `{"t":` + tc.wantT + `,"at":"` + tc.wantAt + `","host":"task.example.com","queue":"resize","id":"9f2c1a0b7d4e6f83","event":"posted","status":"pending","attempts":0,"worker":null,"bytes":{"item":30,"progress":0,"result":0,"error":0},"archived":[]}`
			if diff := cmp.Diff([]string{want}, readLines(t, dayFile(dir, tc.wantDay))); diff != "" {
				t.Errorf("day file (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAppendPayloadBytesAreTheStoredLengths(t *testing.T) {
	// A payload held with spaces and HTML characters: the task file holds it
	// compacted and escaped, and the line counts what the file holds.
	ev := lifecycle(t)["result"]
	ev.Task.Item = json.RawMessage("{ \"url\" : \"a<b\" }") // stored {"url":"a\u003cb"}: 18
	ev.Task.Result = json.RawMessage("[1, 2,\n 3]")         // stored [1,2,3]: 7
	ev.Task.Progress = json.RawMessage("null")              // null is 0
	ev.Worker = "<box & co>"                                // the log itself does not escape HTML

	dir := t.TempDir()
	l := mustOpen(t, dir)
	if err := l.Append(context.Background(), ev, false); err != nil {
		t.Fatal(err)
	}
	want := `{"t":1785056817,"at":"2026-07-26T09:06:57.004Z","host":"task.example.com","queue":"resize","id":"9f2c1a0b7d4e6f83","event":"result","status":"finished","attempts":2,"worker":"<box & co>","bytes":{"item":18,"progress":0,"result":7,"error":0},"archived":[]}`
	if diff := cmp.Diff([]string{want}, readLines(t, dayFile(dir, day0))); diff != "" {
		t.Errorf("day file (-want +got):\n%s", diff)
	}
}

func mustOpen(tb testing.TB, dir string) *eventlog.Log {
	tb.Helper()
	l, err := eventlog.Open(dir)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := l.Close(); err != nil {
			tb.Error(err)
		}
	})
	return l
}

func dayFile(dir, day string) string { return filepath.Join(dir, "tasks", day+".jsonl") }

// readLines returns the lines of a day file, failing unless the file ends
// with a newline (a torn last line).
func readLines(tb testing.TB, path string) []string {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	if len(b) == 0 {
		return nil
	}
	if b[len(b)-1] != '\n' {
		tb.Fatalf("%s does not end with a newline: %q", path, b)
	}
	var lines []string
	for len(b) > 0 {
		i := 0
		for b[i] != '\n' {
			i++
		}
		lines = append(lines, string(b[:i]))
		b = b[i+1:]
	}
	return lines
}
