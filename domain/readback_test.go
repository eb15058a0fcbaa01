package domain

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzReadBack holds readBack's shortcut to the answer of the round trip it
// skips: for any record that encodes, readBack(t, EncodeTask(t)) is
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
	f.Add("0123456789abcdef", "pending", []byte(`{}`), []byte(`{"why": "busy"}`), []byte(nil), "", "alice", "", 4, false, false)
	f.Add("0123456789abcdef", "failed", []byte(`{}`), []byte(`{"why":"<"}`), []byte(nil), "", "alice", "failed", 1, false, true)
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
		// SPEC §11's fields, from what the seeds already vary: a given-back
		// task's failure is a payload like the others.
		if attempts%3 == 1 {
			task.Failure, task.Priority = raws[1], attempts
			task.NotBefore = &task.PostedAt
		}
		data := EncodeTask(task)
		want, wantErr := DecodeTask(data)
		got, gotErr := readBack(task, data)
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("readBack error %v, DecodeTask error %v, for %s", gotErr, wantErr, data)
		}
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("readBack = %+v\nDecodeTask = %+v\nfor %s", got, want, data)
		}
	})
}

// A batch is vetted as its tasks are one by one, and refused whole when
// they are not all of one queue: CreateAll stores one queue's batch.
func TestVetBatch(t *testing.T) {
	a, _ := Post(testID, testHost, testQueue, testItem, "alice", t0)
	b, _ := Post("9f2c1a0b7d4e6f84", testHost, testQueue, testItem, "alice", t0)
	stored, data, err := VetBatch([]Task{a, b})
	if err != nil || len(stored) != 2 || len(data) != 2 || stored[1].ID != b.ID {
		t.Fatalf("VetBatch of one queue's two tasks = %d, %d, %v", len(stored), len(data), err)
	}
	other := b
	other.Queue = "other"
	bad := b
	bad.ID = "../etc"
	for name, batch := range map[string][]Task{"two queues": {a, other}, "a bad id": {a, bad}} {
		if _, _, err := VetBatch(batch); KindOf(err) != KindInvalid {
			t.Errorf("VetBatch of %s = %v, want an invalid_task error", name, err)
		}
	}
}
