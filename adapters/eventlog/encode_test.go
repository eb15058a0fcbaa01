package eventlog_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/taskhoster/taskhoster/adapters/eventlog"
	"github.com/taskhoster/taskhoster/domain"
)

// referenceLine is a day file's line as encoding/json writes it, the form
// the hand-written encoder (EncodeLine) must keep byte for byte: the
// struct's order is the field order.
type referenceLine struct {
	T        int64            `json:"t"`
	At       string           `json:"at"`
	Host     string           `json:"host"`
	Queue    string           `json:"queue"`
	ID       string           `json:"id"`
	Event    domain.EventKind `json:"event"`
	Status   domain.Status    `json:"status"`
	Error    *string          `json:"error,omitempty"`
	Attempts int              `json:"attempts"`
	Worker   *string          `json:"worker"`
	Bytes    struct {
		Item     int `json:"item"`
		Progress int `json:"progress"`
		Result   int `json:"result"`
		Error    int `json:"error"`
	} `json:"bytes"`
	Archived []string `json:"archived"`
}

func referenceEncode(tb testing.TB, ev domain.Event, archived []string) []byte {
	tb.Helper()
	t := ev.Task
	l := referenceLine{
		T: ev.At.Unix(), At: ev.At.UTC().Format("2006-01-02T15:04:05.000Z"),
		Host: t.Host, Queue: t.Queue, ID: t.ID, Event: ev.Kind, Status: t.Status,
		Attempts: t.Attempts, Archived: archived,
	}
	if l.Archived == nil {
		l.Archived = []string{}
	}
	if ev.Kind == domain.EventFailed {
		l.Error = t.Error
	}
	if ev.Worker != "" {
		l.Worker = &ev.Worker
	}
	// The sizes are storedLen's, held to the task file by TestStoredLen*.
	l.Bytes.Item, l.Bytes.Progress, l.Bytes.Result = payloadLen(tb, t.Item), payloadLen(tb, t.Progress), payloadLen(tb, t.Result)
	switch {
	case payloadLen(tb, t.Failure) > 0:
		l.Bytes.Error = payloadLen(tb, t.Failure)
	case t.Error != nil:
		b, _ := json.Marshal(*t.Error)
		l.Bytes.Error = len(b)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(l); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// payloadLen is the length of raw in the bytes domain.EncodeTask writes to
// a task file, 0 for null.
func payloadLen(tb testing.TB, raw json.RawMessage) int {
	tb.Helper()
	if len(raw) == 0 {
		return 0
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(domain.EncodeTask(domain.Task{Item: raw}), &fields); err != nil {
		tb.Fatal(err)
	}
	if string(fields["item"]) == "null" {
		return 0
	}
	return len(fields["item"])
}

// Workers and codes that need escaping, and text that does not.
var oddStrings = []string{
	"box-1", "", `a"b`, `a\b`, "a<b>&c", "tab\there", "nl\n", "\x00\x1f\x7f", "é ü", "\u2028\u2029",
	"\xff\xfe bad utf-8", "emoji 🙂", "/", "'",
}

func TestLinesAreWhatEncodingJSONWrites(t *testing.T) {
	for name, ev := range lifecycle(t) {
		for _, archived := range [][]string{nil, {"item"}, {"progress", "result"}} {
			checkLine(t, name, ev, archived)
		}
		for _, s := range oddStrings {
			odd := ev
			odd.Worker = s
			odd.Task.Error = &s
			checkLine(t, name+" with odd strings", odd, []string{s, "item"})
		}
	}
}

func FuzzLinesAreWhatEncodingJSONWrites(f *testing.F) {
	for _, s := range oddStrings {
		f.Add(s, s, int64(1785056812004), 3)
	}
	f.Fuzz(func(t *testing.T, worker, code string, atMillis int64, attempts int) {
		for _, ev := range lifecycle(t) {
			ev.Worker, ev.Task.Error, ev.Task.Attempts = worker, &code, attempts
			ev.At = time.UnixMilli(atMillis % (1 << 45))
			checkLine(t, "fuzzed", ev, []string{code})
		}
	})
}

func checkLine(t *testing.T, name string, ev domain.Event, archived []string) {
	t.Helper()
	got, want := eventlog.EncodeLine(ev, archived), referenceEncode(t, ev, archived)
	if !bytes.Equal(got, want) {
		t.Errorf("%s (%s):\n got %s\nwant %s", name, ev.Kind, got, want)
	}
}
