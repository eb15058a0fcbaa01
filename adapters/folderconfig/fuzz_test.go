package folderconfig

import (
	"strings"
	"testing"
)

// FuzzQueueFile feeds arbitrary bytes to the queue-file parser: it never
// panics, a refused file reports at least one error with a JSON path that is
// a pointer, and an accepted file has settings within their bounds.
func FuzzQueueFile(f *testing.F) {
	for _, seed := range []string{
		`{"item":{"type":"object"}}`,
		`{"item":{},"progress":{"type":"number"},"result":true,"settings":{"leaseSeconds":5,"retainFrom":"fetched","taskhoster-archivePayloads":true},"access":{"post":"public","work":["alice"]}}`,
		`{"item":{"$ref":"http://127.0.0.1:1/x"}}`,
		`{"item":{},"settings":{"leaseSeconds":1.5}}`,
		`{"item":{},"settings":{"maxItemBytes":1e99}}`,
		`{"item":{},"access":{"post":["nobody"]}}`,
		`{"item":{},"item":{}}`,
		`[]`, `{`, ``, `null`, "\xff\xfe",
	} {
		f.Add([]byte(seed))
	}
	users := map[string]bool{"alice": true}
	f.Fuzz(func(t *testing.T, data []byte) {
		var problems []Problem
		r := &fileReport{file: "q.json", problems: &problems}
		q := parseQueue("task.example.com", "q", data, users, r)
		if q == nil {
			if !HasErrors(problems) {
				t.Fatalf("refused without an error: %q", data)
			}
			for _, p := range problems {
				if p.JSONPath != "" && !strings.HasPrefix(p.JSONPath, "/") {
					t.Fatalf("JSON path %q is not a pointer", p.JSONPath)
				}
			}
			return
		}
		s := q.Settings
		if s.LeaseSeconds <= 0 || s.QueueSeconds <= 0 || s.RetainSeconds <= 0 || s.MaxItemBytes <= 0 || s.MaxItemBytes > 64<<20 {
			t.Fatalf("accepted out-of-range settings %+v from %q", s, data)
		}
		if q.Item == nil || q.Progress == nil || q.Result == nil {
			t.Fatalf("accepted a queue without its schemas: %q", data)
		}
	})
}

// FuzzUserFile: the user-file parser never panics and never quotes the
// token it read in a problem.
func FuzzUserFile(f *testing.F) {
	for _, seed := range []string{
		`{"name":"alice","token":"a11ce0000000000000000000000000a1"}`,
		`{"name":"bob","token":"a11ce0000000000000000000000000a1"}`,
		`{"name":"alice","token":"A11CE0000000000000000000000000A1"}`,
		`{"name":"alice","token":"a11ce0000000000000000000000000a1","x":1}`,
		`{"name":"alice","token":"a11ce00000000000000000000000`,
		`{}`, `[]`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var problems []Problem
		r := &fileReport{file: "alice.json", problems: &problems}
		token := parseUser("alice", data, r)
		if token != "" && (len(token) != 32 || r.failed) {
			t.Fatalf("accepted token %q (failed=%v)", token, r.failed)
		}
		for _, p := range problems {
			if i := strings.Index(string(data), `"token"`); i >= 0 && len(data) > i+12 {
				quoted := string(data[i+9 : min(len(data), i+41)])
				if len(quoted) >= 8 && strings.Contains(p.Reason, quoted) {
					t.Fatalf("problem %q quotes the token", p)
				}
			}
		}
	})
}
