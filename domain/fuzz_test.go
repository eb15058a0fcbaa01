package domain

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// sameJSON compares raw JSON payloads by meaning: DecodeTask keeps a payload's
// bytes as stored, EncodeTask compacts them (and escapes <, >, &), so the
// first round trip may change spacing but never the value.
var sameJSON = cmp.Comparer(func(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	return cmp.Equal(jsonValue(a), jsonValue(b))
})

func jsonValue(raw json.RawMessage) any {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "invalid JSON: " + err.Error()
	}
	return v
}

func FuzzDecodeTask(f *testing.F) {
	seeds := []string{
		seedRecord,
		string(EncodeTask(pendingTask(f))),
		string(EncodeTask(mustFetch(f, finishedTask(f), at(time.Hour)))),
		string(EncodeTask(failedTask(f))),
		`{"id":"0123456789abcdef","status":"pending"}`,
		`{"id":"0123456789abcdef","status":"finished","finishedAt":1,"result":{"a":[1,2,{"b":"<&>"}]}}`,
		`{"id":"0123456789abcdef","status":"pending","item":{ "x" : 1 , "y":"\u00e9"}}`,
		// Broken records.
		``,
		`null`,
		`{}`,
		`[]`,
		`{"id":"0123456789abcdef","status":"processing"}`,
		`{"id":"0123456789abcdef","status":"failed"}`,
		`{"id":"0123456789ABCDEF","status":"pending"}`,
		`{"id":"0123456789abcdef","status":"done","finishedAt":1}`,
		`{"id":"0123456789abcdef","status":"pending","attempts":-1}`,
		`{"id":"0123456789abcdef","status":"pending"}{}`,
		`{"id":"0123456789abcdef","status":"pending"}]`,
		strings.TrimSpace(seedRecord)[:100],
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		task, err := DecodeTask(data)
		if err != nil {
			if !reflect.DeepEqual(task, Task{}) {
				t.Fatalf("DecodeTask returned a task with its error %v: %+v", err, task)
			}
			return
		}
		// What DecodeTask accepts holds together.
		switch {
		case !ValidID(task.ID):
			t.Fatalf("accepted bad id %q", task.ID)
		case !task.Status.Valid():
			t.Fatalf("accepted bad status %q", task.Status)
		case task.Status == Processing && task.Lease == nil:
			t.Fatal("accepted processing without a lease")
		case task.Status.Terminal() && task.FinishedAt == nil:
			t.Fatal("accepted terminal without finishedAt")
		case task.Attempts < 0:
			t.Fatal("accepted negative attempts")
		}

		enc := EncodeTask(task)
		again, err := DecodeTask(enc)
		if err != nil {
			t.Fatalf("re-decoding %q: %v", enc, err)
		}
		if d := cmp.Diff(task, again, sameJSON); d != "" {
			t.Fatalf("round trip changed the task (-decoded +re-decoded):\n%s", d)
		}
		// From the first encoding on, the stored form is stable byte for byte.
		if enc2 := EncodeTask(again); !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not stable:\n%s\n%s", enc, enc2)
		}
		// And the view of any accepted task marshals.
		if _, err := json.Marshal(task.View()); err != nil {
			t.Fatalf("marshal view: %v", err)
		}
	})
}

// FuzzReadBack holds ReadBack's shortcut to the answer of the round trip it
// skips: for any record that encodes, ReadBack(t, EncodeTask(t)) is
// DecodeTask(EncodeTask(t)), error or record, field for field.
func FuzzReadBack(f *testing.F) {
	f.Add("0123456789abcdef", "pending", []byte(`{"url":"a"}`), []byte(nil), []byte(nil), "", "alice", "", 0, false, false)
	f.Add("0123456789abcdef", "processing", []byte(`{"a":[1,2]}`), []byte(`{"pct":5}`), []byte(nil), "box-1", "bob", "", 1, true, false)
	f.Add("0123456789abcdef", "finished", []byte(`{"a":"<&>"}`), []byte(`null`), []byte(`{"ok":true}`), "w", "", "", 2, true, true)
	f.Add("0123456789abcdef", "failed", []byte(`{ "x" : 1 }`), []byte(``), []byte(`"\u2028"`), "w\xff", "\xfe", "timeout", 0, false, true)
	f.Add("0123456789ABCDEF", "pending", []byte(`[]`), []byte(`1`), []byte(`"a b"`), "", "", "", -1, false, false)
	f.Add("0123456789abcdef", "processing", []byte("\"\xe2\x80\xa9\""), []byte(nil), []byte(nil), "", "", "", 0, false, false)
	// Valid records with one thing each that the shortcut must not take.
	f.Add("0123456789abcdef", "pending", []byte(`{ "x" : 1 }`), []byte(nil), []byte(nil), "", "alice", "", 0, false, false)
	f.Add("0123456789abcdef", "pending", []byte(`{"x":"<&>"}`), []byte(nil), []byte(nil), "", "alice", "", 0, false, false)
	f.Add("0123456789abcdef", "pending", []byte("{\"x\":\"\xe2\x80\xa8\"}"), []byte(nil), []byte(nil), "", "alice", "", 0, false, false)
	f.Add("0123456789abcdef", "pending", []byte(`null`), []byte(nil), []byte(nil), "", "alice", "", 0, false, false)
	f.Add("0123456789abcdef", "processing", []byte(`{}`), []byte(nil), []byte(nil), "box\xff", "alice", "", 1, true, false)
	f.Add("0123456789abcdef", "pending", []byte(`{}`), []byte(nil), []byte(nil), "", "al\xffice", "", 0, false, false)
	f.Add("0123456789abcdef", "failed", []byte(`{}`), []byte(nil), []byte(nil), "", "alice", "bad\xff", 0, false, true)
	f.Add("0123456789abcdef", "processing", []byte(`{}`), []byte(`{"pct": 5}`), []byte(nil), "box", "alice", "", 1, true, false)
	f.Add("0123456789abcdef", "finished", []byte(`{}`), []byte(nil), []byte(`{"a":"&"}`), "box", "alice", "", 1, true, true)
	f.Fuzz(func(t *testing.T, id, status string, item, progress, result []byte, worker, postedBy, errText string, attempts int, leased, finished bool) {
		raws := [][]byte{item, progress, result}
		for i, raw := range raws {
			switch {
			case len(raw) == 0:
				raws[i] = nil // absent; an empty non-nil payload is not JSON
			case !json.Valid(raw):
				return // EncodeTask refuses it; no record is made of it
			}
		}
		task := Task{ID: id, Host: "h", Queue: "q", Status: Status(status), Item: raws[0], Progress: raws[1], Result: raws[2], Attempts: attempts}
		if postedBy != "" {
			task.PostedBy = &postedBy
		}
		if errText != "" {
			task.Error = &errText
		}
		if leased {
			task.Lease = &Lease{Worker: worker, Until: 5}
		}
		if finished {
			at := int64(7)
			task.FinishedAt = &at
		}
		data := EncodeTask(task)
		want, wantErr := DecodeTask(data)
		got, gotErr := ReadBack(task, data)
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("ReadBack error %v, DecodeTask error %v, for %s", gotErr, wantErr, data)
		}
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("ReadBack = %+v\nDecodeTask = %+v\nfor %s", got, want, data)
		}
	})
}
