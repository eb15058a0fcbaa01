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
