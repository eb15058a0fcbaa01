package wsapi

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/taskhoster/taskhoster/domain"
)

// encodeCases are parts of task and ack messages: plain ones, which the
// hand-built path writes, and every kind that must go the slow way.
var encodeCases = []struct {
	ref, item string
	id        string
	worker    string
}{
	{`1`, `{"n":1,"body":"xxxx"}`, "0123456789abcdef", "w1"},
	{``, `{"a":[1,2,{"b":null}],"c":true}`, "0123456789abcdef", "host-1.example"},
	{`"r"`, `"a string item"`, "abc", "<w&>"},
	// The store's form: json.Marshal escaped <, > and &; the wire has them back.
	{`2`, `{"html":"\u003cb\u003e\u0026\u003c/b\u003e"}`, "0123456789abcdef", "w"},
	{`"\u003c"`, `1`, "x", "w"},
	{`[1, 2]`, `{ "spaced" : [ 1 , 2 ] }`, "x", "w"},
	{"{\n\"a\":\t1}", "[\r\n1]", "x", "w"},
	{`3`, `{"s":"with spaces inside \" a string\\"}`, "x", "w"},
	{`4`, `{"s":"\\u003c is six characters"}`, "x", "w"},
	{`5`, `{"control":"\u0001\u001f"}`, "x", "w"},
	{`6`, "{\"sep\":\"\u2028 and \u2029\"}", "x", "w"},
	{`7`, `{"sep":"\u2028 escaped already"}`, "x", "w"},
	{`8`, "{\"bad\":\"\xff\xfe\"}", "x", "w"},
	{`9`, `{"é":"ünïcödé €"}`, "x", "w"},
	{`"<&>"`, `{"raw":"<&>"}`, "x", "w"},
	{`10`, `{}`, "quote\"d", "back\\slash"},
	{`11`, `{}`, "tab\tid", "ctl\x01"},
	{`12`, `{}`, "ünï", "\xff"},
	{`13`, `{}`, "id", "a\u2028b"},
}

// TestHandBuiltMessagesAreWhatEncodeWrites holds encodeTask and encodeAck
// to the bytes encode (json.Marshal and httperr's un-escaping) writes for
// the same message, for every case with and without a lease.
func TestHandBuiltMessagesAreWhatEncodeWrites(t *testing.T) {
	fast := 0
	for _, c := range encodeCases {
		for _, lease := range []*domain.Lease{nil, {Worker: c.worker, Until: 1764640000123}} {
			for _, attempts := range []int{0, 1, 12345} {
				if checkTask(t, json.RawMessage(c.ref), c.id, json.RawMessage(c.item), attempts, lease) {
					fast++
				}
			}
			for _, status := range []domain.Status{"", domain.Pending, domain.Finished, domain.Status(c.id)} {
				for _, accepted := range []bool{true, false} {
					checkAck(t, json.RawMessage(c.ref), accepted, status, lease)
				}
			}
		}
	}
	if fast == 0 {
		t.Error("no case took the hand-built path")
	}
}

// checkTask compares the two encodings of one task message and says
// whether the hand-built path wrote it.
func checkTask(t *testing.T, ref json.RawMessage, id string, item json.RawMessage, attempts int, lease *domain.Lease) bool {
	t.Helper()
	want := encode(taskReply{Type: "task", Ref: ref, ID: id, Item: item, Attempts: attempts, Lease: lease})
	got := encodeTask(ref, id, item, attempts, lease)
	if !bytes.Equal(got, want) {
		t.Errorf("task ref %q id %q item %q attempts %d lease %+v:\n got %s\nwant %s", ref, id, item, attempts, lease, got, want)
	}
	_, fast := appendTask(nil, ref, id, item, attempts, lease)
	return fast
}

func checkAck(t *testing.T, ref json.RawMessage, accepted bool, status domain.Status, lease *domain.Lease) {
	t.Helper()
	want := encode(ackReply{Type: "ack", Ref: ref, Accepted: accepted, Status: status, Lease: lease})
	got := encodeAck(ref, accepted, status, lease)
	if !bytes.Equal(got, want) {
		t.Errorf("ack ref %q accepted %v status %q lease %+v:\n got %s\nwant %s", ref, accepted, status, lease, got, want)
	}
}

// FuzzHandBuiltMessagesAreWhatEncodeWrites: for any valid JSON ref (or
// none) and item, and any strings, both encodings agree byte for byte.
// (Refs and items are valid JSON by the time they are sent: the message
// decoder parsed the ref, and the store keeps only valid items.)
func FuzzHandBuiltMessagesAreWhatEncodeWrites(f *testing.F) {
	for _, c := range encodeCases {
		f.Add([]byte(c.ref), []byte(c.item), c.id, c.worker, int64(1764640000123), 3, true, "done")
	}
	f.Fuzz(func(t *testing.T, ref, item []byte, id, worker string, until int64, attempts int, hasLease bool, status string) {
		if (len(ref) > 0 && !json.Valid(ref)) || !json.Valid(item) {
			return
		}
		var lease *domain.Lease
		if hasLease {
			lease = &domain.Lease{Worker: worker, Until: until}
		}
		checkTask(t, ref, id, item, attempts, lease)
		checkAck(t, ref, hasLease, domain.Status(status), lease)
	})
}
