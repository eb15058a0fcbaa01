package eventlog

import (
	"encoding/json"
	"testing"

	"github.com/taskhoster/taskhoster/domain"
)

// lenInTaskFile is what storedLen must match: the length of the payload in
// the bytes domain.EncodeTask writes to a task file.
func lenInTaskFile(tb testing.TB, raw json.RawMessage) int {
	tb.Helper()
	if len(raw) == 0 {
		raw = nil // absent; an empty non-nil RawMessage does not encode
	}
	stored := domain.EncodeTask(domain.Task{ID: "0123456789abcdef", Status: domain.Pending, Item: raw})
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(stored, &fields); err != nil {
		tb.Fatal(err)
	}
	if string(fields["item"]) == "null" {
		return 0
	}
	return len(fields["item"])
}

var storedLenCases = map[string]string{
	"absent":                  "",
	"null":                    "null",
	"null with spaces":        " null\n",
	"compact object":          `{"url":"https://ex.com/a.png"}`,
	"spaces between tokens":   "{ \"a\" :\t[1, 2,\r\n 3] }",
	"spaces inside a string":  `{"a":"x y  z"}`,
	"escaped quote and slash": `{"a":"say \"hi\" \\ \" "}`,
	"html characters":         `{"a":"<b> & </b>"}`,
	"line separators":         "[\"\u2028\u2029\"]",
	"other unicode":           `{"ü":"日本 €"}`,
	"escaped html":            `"\u003c"`,
	"number":                  " 42 ",
	"string at the end":       `"\\"`,
}

func TestStoredLenMatchesTaskFile(t *testing.T) {
	for name, raw := range storedLenCases {
		t.Run(name, func(t *testing.T) {
			if got, want := storedLen(json.RawMessage(raw)), lenInTaskFile(t, json.RawMessage(raw)); got != want {
				t.Errorf("storedLen(%q) = %d, the task file holds %d bytes", raw, got, want)
			}
		})
	}
}

func FuzzStoredLen(f *testing.F) {
	for _, raw := range storedLenCases {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		// The store only ever holds valid JSON.
		if !json.Valid([]byte(raw)) {
			t.Skip()
		}
		if got, want := storedLen(json.RawMessage(raw)), lenInTaskFile(t, json.RawMessage(raw)); got != want {
			t.Errorf("storedLen(%q) = %d, the task file holds %d bytes", raw, got, want)
		}
	})
}
