package eventlog_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/domain"
)

// Tasks of the failure model (SPEC §11), on the queue "resize".
const (
	idR = "5b0e7c2d9a41f386" // given back with a reason, then failed by its worker
	idD = "c4d2a8e61f07b953" // a dead letter: maxAttempts 2, its lease lapses twice
)

// failures walks tasks through the moves of SPEC §11 and returns their
// events, keyed by a case name, in the order they happen.
func failures(tb testing.TB) ([]string, map[string]domain.Event) {
	tb.Helper()
	sec := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }
	must := func(t domain.Task, ev domain.Event, err error) (domain.Task, domain.Event) {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
		return t, ev
	}
	var order []string
	evs := map[string]domain.Event{}
	add := func(name string, ev domain.Event) { order, evs[name] = append(order, name), ev }
	retry := domain.Retry{Settings: domain.Settings{MaxAttempts: 2}}

	r, _ := domain.Post(idR, "task.example.com", "resize", json.RawMessage(`{"url":"https://ex.com/r.png"}`), "", sec(0))
	r, _ = must(r.Claim("box-1", time.Minute, sec(1)))
	r, ev := must(r.Release("box-1", 0, json.RawMessage(`{"exitCode": 3, "stderr": "no <disk>"}`), domain.Retry{}, sec(2)))
	add("released", ev)
	r, _ = must(r.Claim("box-2", time.Minute, sec(3)))
	r, ev = must(r.Release("box-2", 0, nil, domain.Retry{}, sec(4)))
	add("released again without a reason", ev)
	r, _ = must(r.Claim("box-1", time.Minute, sec(5)))
	_, ev = must(r.Fail("box-1", json.RawMessage(`{"why":"bad image"}`), sec(6)))
	add("failed by its worker", ev)

	d, _ := domain.Post(idD, "task.example.com", "resize", json.RawMessage(`{"url":"https://ex.com/d.png"}`), "", sec(0))
	d, _ = must(d.Claim("box-1", time.Minute, sec(1)))
	d, _ = must(d.Requeue(domain.CauseLease, retry, sec(2)))
	d, _ = must(d.Claim("box-2", time.Minute, sec(3)))
	_, ev = must(d.Requeue(domain.CauseSocket, retry, sec(7)))
	add("dead letter", ev)

	n, _ := domain.Post("7e3f9d1c0b5a2468", "task.example.com", "resize", json.RawMessage(`{"url":"https://ex.com/n.png"}`), "", sec(0))
	n, _ = must(n.Claim("box-3", time.Minute, sec(1)))
	_, ev = must(n.Fail("box-3", nil, sec(8)))
	add("failed without a reason", ev)
	return order, evs
}

func TestAppendWritesExactFailureLines(t *testing.T) {
	_, evs := failures(t)
	tests := []struct {
		name string
		want string
	}{
		// The reason is stored compacted and escaped: 45 bytes.
		{"released", `{"t":1785056814,"at":"2026-07-26T09:06:54.004Z","host":"task.example.com","queue":"resize","id":"5b0e7c2d9a41f386","event":"released","status":"pending","attempts":1,"worker":"box-1","bytes":{"item":30,"progress":0,"result":0,"error":45},"archived":[]}`},
		// The earlier reason is still the task's failure.
		{"released again without a reason", `{"t":1785056816,"at":"2026-07-26T09:06:56.004Z","host":"task.example.com","queue":"resize","id":"5b0e7c2d9a41f386","event":"released","status":"pending","attempts":2,"worker":"box-2","bytes":{"item":30,"progress":0,"result":0,"error":45},"archived":[]}`},
		{"failed by its worker", `{"t":1785056818,"at":"2026-07-26T09:06:58.004Z","host":"task.example.com","queue":"resize","id":"5b0e7c2d9a41f386","event":"failed","status":"failed","error":"failed","attempts":3,"worker":"box-1","bytes":{"item":30,"progress":0,"result":0,"error":19},"archived":[]}`},
		{"dead letter", `{"t":1785056819,"at":"2026-07-26T09:06:59.004Z","host":"task.example.com","queue":"resize","id":"c4d2a8e61f07b953","event":"failed","status":"failed","error":"attempts","attempts":2,"worker":"box-2","bytes":{"item":30,"progress":0,"result":0,"error":10},"archived":[]}`},
		{"failed without a reason", `{"t":1785056820,"at":"2026-07-26T09:07:00.004Z","host":"task.example.com","queue":"resize","id":"7e3f9d1c0b5a2468","event":"failed","status":"failed","error":"failed","attempts":1,"worker":"box-3","bytes":{"item":30,"progress":0,"result":0,"error":8},"archived":[]}`},
	}
	if len(tests) != len(evs) {
		t.Fatalf("%d cases for %d events", len(tests), len(evs))
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := mustOpen(t, dir)
			if err := l.Append(context.Background(), evs[tc.name], false); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{tc.want}, readLines(t, dayFile(dir, day0))); diff != "" {
				t.Errorf("day file (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAppendArchivesFailures: a give-back or failure archives its reason as
// error.json, a later one replaces it, and a move without any writes none;
// each body is as long as its line's bytes.error says.
func TestAppendArchivesFailures(t *testing.T) {
	order, evs := failures(t)
	reason := `{"exitCode":3,"stderr":"no \u003cdisk\u003e"}`
	errR := filepath.Join(idR, "error.json")
	errD := filepath.Join(idD, "error.json")
	errN := filepath.Join("7e3f9d1c0b5a2468", "error.json")
	steps := map[string]struct {
		archived []string
		files    map[string]string // the task's error.json files after the event
	}{
		"released":                        {[]string{"error"}, map[string]string{errR: reason}},
		"released again without a reason": {[]string{"error"}, map[string]string{errR: reason}},
		"failed by its worker":            {[]string{"error"}, map[string]string{errR: `{"why":"bad image"}`}},
		"dead letter":                     {[]string{"error"}, map[string]string{errR: `{"why":"bad image"}`, errD: `"attempts"`}},
		"failed without a reason":         {[]string{"error"}, map[string]string{errR: `{"why":"bad image"}`, errD: `"attempts"`, errN: `"failed"`}},
	}
	dir := t.TempDir()
	l := mustOpen(t, dir)
	for i, name := range order {
		s := steps[name]
		ev := evs[name]
		// Only the error bodies: the posts are not appended here.
		if err := l.Append(context.Background(), ev, true); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		raw := readLines(t, dayFile(dir, day0))[i]
		if diff := cmp.Diff(s.archived, archivedOf(t, raw)); diff != "" {
			t.Errorf("%s: archived (-want +got):\n%s", name, diff)
		}
		if diff := cmp.Diff(s.files, archiveFiles(t, dir)); diff != "" {
			t.Errorf("after %s: archive (-want +got):\n%s", name, diff)
		}
		var l struct {
			Bytes struct {
				Error int `json:"error"`
			} `json:"bytes"`
		}
		if err := json.Unmarshal([]byte(raw), &l); err != nil {
			t.Fatal(err)
		}
		file := map[string]string{idR: errR, idD: errD}[ev.Task.ID]
		if file == "" {
			file = errN
		}
		if got := len(archiveFiles(t, dir)[file]); got != l.Bytes.Error {
			t.Errorf("%s: error.json has %d bytes, the line says %d", name, got, l.Bytes.Error)
		}
	}
}
