package tasklog_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/domain/tasklog"
)

// seedLine is the example line of the seed "Store" document.
const seedLine = `{"t":1751500012,"at":"2026-07-26T09:06:52.004Z","host":"task.example.com","queue":"resize","id":"9f2c1a0b7d4e6f83","event":"result","status":"finished","attempts":1,"worker":"box-1","bytes":{"item":74,"progress":14,"result":2048,"error":0},"archived":["result"]}`

func TestParseLineReadsTheSeedLine(t *testing.T) {
	got, err := tasklog.ParseLine([]byte(seedLine))
	if err != nil {
		t.Fatal(err)
	}
	want := tasklog.Line{
		T:        1751500012,
		At:       time.Date(2026, 7, 26, 9, 6, 52, 4e6, time.UTC),
		Host:     "task.example.com",
		Queue:    "resize",
		ID:       "9f2c1a0b7d4e6f83",
		Event:    domain.EventResult,
		Status:   domain.Finished,
		Attempts: 1,
		Worker:   "box-1",
		Bytes:    tasklog.Sizes{Item: 74, Progress: 14, Result: 2048},
		Archived: []string{"result"},
		Raw:      seedLine,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseLine (-want +got):\n%s", diff)
	}
}

func TestParseLine(t *testing.T) {
	cases := []struct {
		name, line string
		ok         bool
		check      func(t *testing.T, l tasklog.Line)
	}{
		{"no worker, no archive", `{"t":1,"host":"h.example","queue":"q","id":"0123456789abcdef","event":"posted","worker":null}`, true,
			func(t *testing.T, l tasklog.Line) {
				if l.Worker != "" || l.Archived != nil || !l.At.Equal(time.Unix(1, 0)) {
					t.Errorf("worker %q, archived %v, at %v", l.Worker, l.Archived, l.At)
				}
			}},
		{"an unknown event and field are kept", `{"t":1,"host":"h","queue":"q","id":"0123456789abcdef","event":"paused","new":1}`, true,
			func(t *testing.T, l tasklog.Line) {
				if l.Event != "paused" {
					t.Errorf("event %q", l.Event)
				}
			}},
		{"odd archived kinds are dropped", `{"t":1,"host":"h","queue":"q","id":"0123456789abcdef","event":"posted","archived":["item","../x",""]}`, true,
			func(t *testing.T, l tasklog.Line) {
				if diff := cmp.Diff([]string{"item"}, l.Archived); diff != "" {
					t.Errorf("archived (-want +got):\n%s", diff)
				}
			}},
		{"not JSON", `{"t":`, false, nil},
		{"no t", `{"host":"h","queue":"q","id":"0123456789abcdef","event":"posted"}`, false, nil},
		{"a host that climbs", `{"t":1,"host":"../etc","queue":"q","id":"0123456789abcdef","event":"posted"}`, false, nil},
		{"a bad queue", `{"t":1,"host":"h","queue":"Q/../x","id":"0123456789abcdef","event":"posted"}`, false, nil},
		{"a bad id", `{"t":1,"host":"h","queue":"q","id":"0123","event":"posted"}`, false, nil},
		{"a bad event", `{"t":1,"host":"h","queue":"q","id":"0123456789abcdef","event":"<b>"}`, false, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, err := tasklog.ParseLine([]byte(tc.line))
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok %v", err, tc.ok)
			}
			if tc.check != nil {
				tc.check(t, l)
			}
		})
	}
}

func FuzzParseLine(f *testing.F) {
	f.Add([]byte(seedLine))
	f.Add([]byte(`{"t":1,"host":"h","queue":"q","id":"0123456789abcdef","event":"posted","archived":["item"]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		l, err := tasklog.ParseLine(raw)
		if err != nil {
			return
		}
		// What becomes a URL or a file name has the server's form.
		if !domain.ValidHost(l.Host) || !domain.ValidName(l.Queue) || !domain.ValidID(l.ID) {
			t.Errorf("accepted names %q %q %q", l.Host, l.Queue, l.ID)
		}
		for _, kind := range l.Archived {
			if file, ok := tasklog.PayloadFile(kind); ok && !tasklog.ValidPayloadFile(file) {
				t.Errorf("kind %q gives file %q", kind, file)
			}
		}
	})
}

func TestCanonicalHost(t *testing.T) {
	for in, want := range map[string]string{
		"task.example.com":                "task.example.com",
		"Task.Example.COM:8080":           "task.example.com",
		"task.example.com.localhost:8080": "task.example.com",
		"localhost:8080":                  "localhost",
		"127.0.0.1:8080":                  "127.0.0.1",
		"[::1]:8080":                      "[::1]",
		// The server finds a host folder by a name with its root dot too
		// (task.example.com.): pulling through it must key lines alike.
		"task.example.com.:8080":           "task.example.com",
		"task.example.com.localhost.:8080": "task.example.com",
	} {
		if got := tasklog.CanonicalHost(in); got != want {
			t.Errorf("CanonicalHost(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPositionRoundTrip(t *testing.T) {
	p := tasklog.Position{Millis: 1751500012004, Seq: 42}
	got, err := tasklog.ParsePosition(p.String())
	if err != nil || got != p {
		t.Errorf("ParsePosition(%q) = %v, %v", p.String(), got, err)
	}
	for _, bad := range []string{"", "12", "a-1", "1-b", "1--1", "1-2-3"} {
		if _, err := tasklog.ParsePosition(bad); domain.KindOf(err) != domain.KindInvalid {
			t.Errorf("ParsePosition(%q): err = %v, want KindInvalid", bad, err)
		}
	}
}

func TestPayloadFiles(t *testing.T) {
	for kind, file := range map[string]string{"item": "item.json", "progress": "progress.jsonl",
		"result": "result.json", "error": "error.json"} {
		got, ok := tasklog.PayloadFile(kind)
		if !ok || got != file || !tasklog.ValidPayloadFile(file) {
			t.Errorf("PayloadFile(%q) = %q, %v", kind, got, ok)
		}
	}
	if _, ok := tasklog.PayloadFile("video"); ok {
		t.Errorf("an unknown kind has a file")
	}
	if tasklog.ValidPayloadFile("../item.json") {
		t.Errorf("a path is a payload file")
	}
	if tasklog.ContentType("progress.jsonl") != "application/x-ndjson" || tasklog.ContentType("item.json") != "application/json" {
		t.Errorf("content types")
	}
}

func TestCursorOrder(t *testing.T) {
	if !(tasklog.Cursor{Offset: 10, Skip: 3}).Less(tasklog.Cursor{Offset: 11}) ||
		!(tasklog.Cursor{Offset: 10}).Less(tasklog.Cursor{Offset: 10, Skip: 1}) ||
		(tasklog.Cursor{Offset: 10}).Less(tasklog.Cursor{Offset: 10}) {
		t.Errorf("Cursor.Less is not offset, then skip")
	}
}

// TestParseLineReadsTheFailureModel reads the lines SPEC §11 adds (as
// adapters/eventlog writes them) and the error code each tells.
func TestParseLineReadsTheFailureModel(t *testing.T) {
	cases := []struct {
		name, line        string
		event             domain.EventKind
		errCode           string
		failure, gaveBack bool
		errBytes          int64
	}{
		{"released", `{"t":1785056814,"at":"2026-07-26T09:06:54.004Z","host":"task.example.com","queue":"resize","id":"5b0e7c2d9a41f386","event":"released","status":"pending","attempts":1,"worker":"box-1","bytes":{"item":30,"progress":0,"result":0,"error":45},"archived":["error"]}`,
			domain.EventReleased, "", false, true, 45},
		{"failed by its worker", `{"t":1785056818,"at":"2026-07-26T09:06:58.004Z","host":"task.example.com","queue":"resize","id":"5b0e7c2d9a41f386","event":"failed","status":"failed","error":"failed","attempts":3,"worker":"box-1","bytes":{"item":30,"progress":0,"result":0,"error":19},"archived":[]}`,
			domain.EventFailed, "failed", true, false, 19},
		{"dead letter", `{"t":1785056819,"at":"2026-07-26T09:06:59.004Z","host":"task.example.com","queue":"resize","id":"c4d2a8e61f07b953","event":"failed","status":"failed","error":"attempts","attempts":2,"worker":"box-2","bytes":{"item":30,"progress":0,"result":0,"error":10},"archived":[]}`,
			domain.EventFailed, "attempts", true, false, 10},
		{"timeout: the code is the event's", `{"t":1,"host":"h","queue":"q","id":"0123456789abcdef","event":"timeout","status":"failed","bytes":{"error":9}}`,
			domain.EventTimeout, "timeout", true, false, 9},
		{"a failed line of an older server has no code", `{"t":1,"host":"h","queue":"q","id":"0123456789abcdef","event":"failed","status":"failed"}`,
			domain.EventFailed, "", true, false, 0},
		{"a code that is not a word is dropped", `{"t":1,"host":"h","queue":"q","id":"0123456789abcdef","event":"failed","error":"<b>x</b>"}`,
			domain.EventFailed, "", true, false, 0},
		{"cancelled: a failure with its code", `{"t":1785056822,"at":"2026-07-26T09:07:02.004Z","host":"task.example.com","queue":"resize","id":"5e0d9c2b4a7f1836","event":"cancelled","status":"failed","error":"cancelled","attempts":1,"worker":"box-3","bytes":{"item":30,"progress":0,"result":0,"error":11},"archived":[]}`,
			domain.EventCancelled, "cancelled", true, false, 11},
		{"cancelled without the field: the code is the event's", `{"t":1,"host":"h","queue":"q","id":"0123456789abcdef","event":"cancelled","status":"failed"}`,
			domain.EventCancelled, "cancelled", true, false, 0},
		{"retried: back to pending, no code", `{"t":1785056823,"at":"2026-07-26T09:07:03.004Z","host":"task.example.com","queue":"resize","id":"5e0d9c2b4a7f1836","event":"retried","status":"pending","attempts":0,"worker":null,"bytes":{"item":30,"progress":0,"result":0,"error":0},"archived":[]}`,
			domain.EventRetried, "", false, false, 0},
		{"no code on a result", `{"t":1,"host":"h","queue":"q","id":"0123456789abcdef","event":"result","status":"finished"}`,
			domain.EventResult, "", false, false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, err := tasklog.ParseLine([]byte(tc.line))
			if err != nil {
				t.Fatal(err)
			}
			if l.Event != tc.event || l.Error != tc.errCode || l.Failure() != tc.failure || l.GaveBack() != tc.gaveBack || l.Bytes.Error != tc.errBytes {
				t.Errorf("event %q error %q failure %v gave back %v bytes.error %d", l.Event, l.Error, l.Failure(), l.GaveBack(), l.Bytes.Error)
			}
		})
	}
	if l, err := tasklog.ParseLine([]byte(cases[len(cases)-2].line)); err != nil || !l.Retried() || l.Status != domain.Pending {
		t.Errorf("a retried line: %+v, %v", l, err)
	}
	if err := (tasklog.Filter{Error: "no such"}).Validate(); domain.KindOf(err) != domain.KindInvalid {
		t.Errorf("a filter by a code that is not a word: err = %v", err)
	}
	if err := (tasklog.Filter{Error: "attempts", Event: domain.EventReleased}).Validate(); err != nil {
		t.Errorf("a filter by error and event: %v", err)
	}
}

// TestParseLineKeepsAWorkerNameThatWasNotUTF8: the server takes a socket's
// ?worker= of up to 200 bytes as they come, and writes a byte that is not
// UTF-8 as "\ufffd", which reads back as three bytes. Such a worker's lines
// are event lines all the same, and can be filtered by: otherwise a worker
// could keep its claims and results out of the mirror by its name.
func TestParseLineKeepsAWorkerNameThatWasNotUTF8(t *testing.T) {
	worker := strings.Repeat(`\ufffd`, 200) // 200 bytes 0xff, as the server writes them
	line := `{"t":1,"host":"h.example","queue":"q","id":"0123456789abcdef","event":"claimed","status":"processing","attempts":1,"worker":"` + worker + `"}`
	l, err := tasklog.ParseLine([]byte(line))
	if err != nil {
		t.Fatalf("ParseLine: %v", err)
	}
	if want := strings.Repeat("\ufffd", 200); l.Worker != want {
		t.Errorf("worker %q, want %q", l.Worker, want)
	}
	if err := (tasklog.Filter{Worker: l.Worker}).Validate(); err != nil {
		t.Errorf("a filter by that worker: %v", err)
	}
	if _, err := tasklog.ParseLine([]byte(strings.Replace(line, worker, strings.Repeat("x", 201), 1))); err == nil {
		t.Error("ParseLine took a worker name of 201 characters")
	}
}
