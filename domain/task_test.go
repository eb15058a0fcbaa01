package domain

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestStatus(t *testing.T) {
	tests := []struct {
		status       Status
		wantValid    bool
		wantTerminal bool
		wantDir      string
	}{
		{Pending, true, false, "pending"},
		{Processing, true, false, "processing"},
		{Finished, true, true, "done"},
		{Failed, true, true, "done"},
		{"done", false, false, "done"},
		{"", false, false, ""},
		{"PENDING", false, false, "PENDING"},
	}
	for _, tc := range tests {
		t.Run(string(tc.status), func(t *testing.T) {
			if got := tc.status.Valid(); got != tc.wantValid {
				t.Errorf("Valid() = %v, want %v", got, tc.wantValid)
			}
			if got := tc.status.Terminal(); got != tc.wantTerminal {
				t.Errorf("Terminal() = %v, want %v", got, tc.wantTerminal)
			}
			if tc.wantValid {
				if got := tc.status.Dir(); got != tc.wantDir {
					t.Errorf("Dir() = %q, want %q", got, tc.wantDir)
				}
			}
		})
	}
	if d := cmp.Diff([]string{"pending", "processing", "done"}, Dirs); d != "" {
		t.Errorf("Dirs (-want +got):\n%s", d)
	}
}

// seedRecord is the seed's "One task on disc, mid-flight", compacted.
const seedRecord = `{"id":"9f2c1a0b7d4e6f83","host":"task.example.com","queue":"resize","status":"processing",` +
	`"item":{"url":"https://ex.com/a.png","format":"jpg","width":800},"postedBy":"alice",` +
	`"postedAt":1751500000000,"updatedAt":1751500012000,"attempts":1,` +
	`"lease":{"worker":"box-1","until":1751500072000},"progress":{"percent":40},` +
	`"result":null,"error":null,"finishedAt":null,"fetchedAt":null}` + "\n"

// seedTask reaches the seed record through the state machine: posted at
// t0, claimed at once, progress 12 s later extends the 60 s lease to +72 s.
func seedTask(tb testing.TB) Task {
	tb.Helper()
	task := mustClaim(tb, mustPost(tb), "box-1", t0)
	task, _, err := task.ReportProgress("box-1", json.RawMessage(`{"percent":40}`), time.Minute, at(12*time.Second))
	if err != nil {
		tb.Fatal(err)
	}
	return task
}

func TestEncodeTaskSeedRecord(t *testing.T) {
	got := string(EncodeTask(seedTask(t)))
	if got != seedRecord {
		t.Errorf("EncodeTask:\n got %s\nwant %s", got, seedRecord)
	}
}

// topLevelKeys lists the keys of a JSON object in the order they appear.
func topLevelKeys(tb testing.TB, data []byte) []string {
	tb.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		tb.Fatalf("not an object: %v %v", tok, err)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			tb.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			tb.Fatal(err)
		}
	}
	return keys
}

func TestEncodeTaskFieldOrder(t *testing.T) {
	want := []string{
		"id", "host", "queue", "status", "item", "postedBy", "postedAt", "updatedAt",
		"attempts", "lease", "progress", "result", "error", "finishedAt", "fetchedAt",
	}
	for _, tc := range []struct {
		name string
		task func(testing.TB) Task
	}{
		{"pending", pendingTask},
		{"processing", seedTask},
		{"finished and fetched", func(tb testing.TB) Task { return mustFetch(tb, finishedTask(tb), at(time.Hour)) }},
		{"failed", failedTask},
		{"zero task", func(testing.TB) Task { return Task{} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			enc := EncodeTask(tc.task(t))
			if !bytes.HasSuffix(enc, []byte("}\n")) || bytes.Count(enc, []byte("\n")) != 1 {
				t.Errorf("EncodeTask is not one object and a newline: %q", enc)
			}
			if d := cmp.Diff(want, topLevelKeys(t, enc)); d != "" {
				t.Errorf("keys (-want +got):\n%s", d)
			}
		})
	}
}

func TestEncodeTaskNulls(t *testing.T) {
	// Absent payloads are stored as JSON null, never omitted.
	got := string(EncodeTask(Task{ID: testID, Status: Pending}))
	want := `{"id":"9f2c1a0b7d4e6f83","host":"","queue":"","status":"pending","item":null,"postedBy":null,` +
		`"postedAt":0,"updatedAt":0,"attempts":0,"lease":null,"progress":null,"result":null,` +
		`"error":null,"finishedAt":null,"fetchedAt":null}` + "\n"
	if got != want {
		t.Errorf("EncodeTask:\n got %s\nwant %s", got, want)
	}
}

func TestDecodeTaskRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		task func(testing.TB) Task
	}{
		{"pending, by a user", pendingTask},
		{"pending, anonymous", func(testing.TB) Task {
			task, _ := Post(testID, testHost, testQueue, testItem, "", t0)
			return task
		}},
		{"processing with progress (the seed)", seedTask},
		{"re-queued, keeps progress and attempts", func(tb testing.TB) Task { return mustRequeue(tb, seedTask(tb), at(5*time.Minute)) }},
		{"finished", finishedTask},
		{"finished and fetched", func(tb testing.TB) Task { return mustFetch(tb, finishedTask(tb), at(time.Hour)) }},
		{"failed by timeout", failedTask},
		{"finished with a null result", func(tb testing.TB) Task { return mustFinish(tb, processingTask(tb), "box-1", "null", at(time.Minute)) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.task(t)
			// A JSON null payload is held as nil, as DecodeTask normalises it.
			want.Result = nonNull(want.Result)
			got, err := DecodeTask(EncodeTask(want))
			if err != nil {
				t.Fatalf("DecodeTask: %v", err)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("round trip (-want +got):\n%s", d)
			}
		})
	}
}

func TestDecodeTaskSeedRecord(t *testing.T) {
	// The seed's record as printed there, indented, decodes to seedTask.
	indented := `{
  "id": "9f2c1a0b7d4e6f83",
  "host": "task.example.com",
  "queue": "resize",
  "status": "processing",
  "item": {"url":"https://ex.com/a.png","format":"jpg","width":800},
  "postedBy": "alice",
  "postedAt": 1751500000000,
  "updatedAt": 1751500012000,
  "attempts": 1,
  "lease": { "worker": "box-1", "until": 1751500072000 },
  "progress": {"percent":40},
  "result": null,
  "error": null,
  "finishedAt": null,
  "fetchedAt": null
}
`
	got, err := DecodeTask([]byte(indented))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(seedTask(t), got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

// record is the seed record with some fields replaced (raw JSON values) or,
// for a nil value, removed.
func record(tb testing.TB, changes map[string]*string) []byte {
	tb.Helper()
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(seedRecord), &fields); err != nil {
		tb.Fatal(err)
	}
	for k, v := range changes {
		if v == nil {
			delete(fields, k)
		} else {
			fields[k] = json.RawMessage(*v)
		}
	}
	b, err := json.Marshal(fields)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func raw(s string) *string { return &s }

func TestDecodeTaskRejects(t *testing.T) {
	finished := map[string]*string{"status": raw(`"finished"`), "lease": raw("null")}
	with := func(base map[string]*string, k string, v *string) map[string]*string {
		m := map[string]*string{k: v}
		for bk, bv := range base {
			if _, ok := m[bk]; !ok {
				m[bk] = bv
			}
		}
		return m
	}
	tests := []struct {
		name    string
		data    func(testing.TB) []byte
		wantErr string
	}{
		{"empty input", func(testing.TB) []byte { return nil }, "EOF"},
		{"not JSON", func(testing.TB) []byte { return []byte("hello") }, "invalid character"},
		{"truncated", func(testing.TB) []byte { return []byte(seedRecord[:40]) }, "unexpected EOF"},
		{"JSON null", func(testing.TB) []byte { return []byte("null") }, "bad id"},
		{"an array", func(testing.TB) []byte { return []byte("[]") }, "cannot unmarshal"},
		{"missing id", func(tb testing.TB) []byte { return record(tb, map[string]*string{"id": nil}) }, "bad id"},
		{"id too short", func(tb testing.TB) []byte { return record(tb, map[string]*string{"id": raw(`"9f2c1a0b7d4e6f8"`)}) }, "bad id"},
		{"id upper case", func(tb testing.TB) []byte { return record(tb, map[string]*string{"id": raw(`"9F2C1A0B7D4E6F83"`)}) }, "bad id"},
		{"id a path", func(tb testing.TB) []byte { return record(tb, map[string]*string{"id": raw(`"../../etc/passwd"`)}) }, "bad id"},
		{"id a number", func(tb testing.TB) []byte { return record(tb, map[string]*string{"id": raw(`12345678`)}) }, "cannot unmarshal"},
		{"status done (a directory, not a status)", func(tb testing.TB) []byte { return record(tb, map[string]*string{"status": raw(`"done"`)}) }, "bad status"},
		{"status missing", func(tb testing.TB) []byte { return record(tb, map[string]*string{"status": nil}) }, "bad status"},
		{"status upper case", func(tb testing.TB) []byte { return record(tb, map[string]*string{"status": raw(`"PENDING"`)}) }, "bad status"},
		{"processing without lease", func(tb testing.TB) []byte { return record(tb, map[string]*string{"lease": raw("null")}) }, "without a lease"},
		{"processing, lease missing", func(tb testing.TB) []byte { return record(tb, map[string]*string{"lease": nil}) }, "without a lease"},
		{"finished without finishedAt", func(tb testing.TB) []byte { return record(tb, finished) }, "without finishedAt"},
		{"failed without finishedAt", func(tb testing.TB) []byte {
			return record(tb, with(finished, "status", raw(`"failed"`)))
		}, "without finishedAt"},
		{"negative attempts", func(tb testing.TB) []byte { return record(tb, map[string]*string{"attempts": raw("-1")}) }, "negative attempts"},
		{"attempts a string", func(tb testing.TB) []byte { return record(tb, map[string]*string{"attempts": raw(`"1"`)}) }, "cannot unmarshal"},
		{"postedAt a fraction", func(tb testing.TB) []byte { return record(tb, map[string]*string{"postedAt": raw("1751500000000.5")}) }, "cannot unmarshal"},
		{"trailing object", func(testing.TB) []byte { return []byte(seedRecord + seedRecord) }, "trailing data"},
		{"trailing word", func(testing.TB) []byte { return []byte(seedRecord + "x") }, "trailing data"},
		{"trailing comma", func(testing.TB) []byte { return []byte(strings.TrimSpace(seedRecord) + ",") }, "trailing data"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeTask(tc.data(t))
			if err == nil {
				t.Fatalf("DecodeTask accepted it: %+v", got)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("err = %v, want it to mention %q", err, tc.wantErr)
			}
			if d := cmp.Diff(Task{}, got); d != "" {
				t.Errorf("a rejected record returned a task:\n%s", d)
			}
		})
	}
}

// json.Decoder.More reports false before '}' or ']', so a record followed by
// a stray closing bracket (a torn or doubled write) must still be refused.
func TestDecodeTaskRejectsTrailingBracket(t *testing.T) {
	for _, tail := range []string{"}", "]", " }\n", "]]"} {
		t.Run(fmt.Sprintf("%q", tail), func(t *testing.T) {
			data := strings.TrimSpace(seedRecord) + tail
			if _, err := DecodeTask([]byte(data)); err == nil {
				t.Errorf("DecodeTask accepts %q after the record", tail)
			}
		})
	}
}

func TestDecodeTaskNormalisesNulls(t *testing.T) {
	got, err := DecodeTask(record(t, map[string]*string{
		"item": raw("null"), "progress": raw("null"), "result": nil,
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got.Item != nil || got.Progress != nil || got.Result != nil {
		t.Errorf("item %q, progress %q, result %q; want all nil", got.Item, got.Progress, got.Result)
	}
}

func TestView(t *testing.T) {
	task := mustFetch(t, finishedTask(t), at(time.Hour))
	task.Progress = json.RawMessage(`{"percent":100}`)
	got := task.View()
	want := View{
		ID: testID, Queue: testQueue, Status: Finished, Attempts: 1,
		Progress: json.RawMessage(`{"percent":100}`), Result: json.RawMessage(`{"ok":true}`),
		PostedAt: ms(0), UpdatedAt: ms(10 * time.Second), FinishedAt: ptr(ms(10 * time.Second)),
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("View (-want +got):\n%s", d)
	}

	// The JSON of a view: the SPEC §3 fields, nulls present, and nothing of
	// host, item, postedBy, lease or fetchedAt.
	b, err := json.Marshal(seedTask(t).View())
	if err != nil {
		t.Fatal(err)
	}
	wantJSON := `{"id":"9f2c1a0b7d4e6f83","queue":"resize","status":"processing","attempts":1,` +
		`"progress":{"percent":40},"result":null,"error":null,"postedAt":1751500000000,` +
		`"updatedAt":1751500012000,"finishedAt":null}`
	if string(b) != wantJSON {
		t.Errorf("view JSON:\n got %s\nwant %s", b, wantJSON)
	}
	for _, hidden := range []string{"host", "item", "postedBy", "lease", "fetchedAt"} {
		if bytes.Contains(b, []byte(`"`+hidden+`"`)) {
			t.Errorf("view JSON has %q", hidden)
		}
	}

	// A failed task shows its error.
	fv, err := json.Marshal(failedTask(t).View())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(fv, []byte(`"status":"failed"`)) || !bytes.Contains(fv, []byte(`"error":"timeout"`)) {
		t.Errorf("failed view JSON: %s", fv)
	}
}

func TestClone(t *testing.T) {
	orig := mustFetch(t, failedTask(t), at(26*time.Hour))
	orig.Lease = &Lease{Worker: "box-1", Until: 1}
	want := orig.Clone()
	c := orig.Clone()
	*c.PostedBy = "mallory"
	c.Lease.Worker = "box-9"
	*c.Error = "changed"
	*c.FinishedAt = 1
	*c.FetchedAt = 1
	if d := cmp.Diff(want, orig); d != "" {
		t.Errorf("changing a clone changed the original (-want +got):\n%s", d)
	}
	if d := cmp.Diff(Task{}, Task{}.Clone()); d != "" {
		t.Errorf("clone of the zero task:\n%s", d)
	}
}

func TestValidID(t *testing.T) {
	tests := []struct {
		id   string
		want bool
	}{
		{"9f2c1a0b7d4e6f83", true},
		{"0000000000000000", true},
		{"ffffffffffffffff", true},
		{"", false},
		{"9f2c1a0b7d4e6f8", false},
		{"9f2c1a0b7d4e6f830", false},
		{"9F2C1A0B7D4E6F83", false},
		{"9f2c1a0b7d4e6f8g", false},
		{"9f2c1a0b7d4e6f83\n", false},
		{"../9f2c1a0b7d4e6f", false},
		{"9f2c1a0b7d4e6f.json", false},
		{" 9f2c1a0b7d4e6f83", false},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%q", tc.id), func(t *testing.T) {
			if got := ValidID(tc.id); got != tc.want {
				t.Errorf("ValidID(%q) = %v, want %v", tc.id, got, tc.want)
			}
		})
	}
}

func TestIsNull(t *testing.T) {
	for _, tc := range []struct {
		raw  json.RawMessage
		want bool
	}{
		{nil, true},
		{json.RawMessage{}, true},
		{json.RawMessage("null"), true},
		{json.RawMessage(`"null"`), false},
		{json.RawMessage("{}"), false},
		{json.RawMessage("0"), false},
	} {
		if got := IsNull(tc.raw); got != tc.want {
			t.Errorf("IsNull(%q) = %v, want %v", tc.raw, got, tc.want)
		}
	}
}

func TestMillis(t *testing.T) {
	if got, want := Millis(t0.Add(1500*time.Microsecond)), int64(1751500000001); got != want {
		t.Errorf("Millis = %d, want %d", got, want)
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		wantKind Kind
		wantIs   error
	}{
		{"terminal", ErrTerminal, KindConflict, ErrTerminal},
		{"not pending", ErrNotPending, KindConflict, ErrNotPending},
		{"not processing", ErrNotProcessing, KindConflict, ErrNotProcessing},
		{"not lease holder", ErrNotLeaseHolder, KindConflict, ErrNotLeaseHolder},
		{"not found", ErrNotFound, KindNotFound, ErrNotFound},
		{"wrapped sentinel", fmt.Errorf("finish: %w", ErrTerminal), KindConflict, ErrTerminal},
		{"built with E", E(KindTooLarge, "too_large", "over %d bytes", 10), KindTooLarge, nil},
		{"plain error is internal", errors.New("boom"), KindInternal, nil},
		{"nil is internal", nil, KindInternal, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := KindOf(tc.err); got != tc.wantKind {
				t.Errorf("KindOf = %v, want %v", got, tc.wantKind)
			}
			if tc.wantIs != nil && !errors.Is(tc.err, tc.wantIs) {
				t.Errorf("errors.Is(%v, %v) = false", tc.err, tc.wantIs)
			}
		})
	}

	e := &Error{Kind: KindInvalid, Code: "invalid_item", Message: "bad width", Err: errors.New("cause")}
	if got, want := e.Error(), "invalid_item: bad width: cause"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(e, e.Err) {
		t.Error("Unwrap does not reach the cause")
	}
	if got, want := E(KindTooLarge, "too_large", "over %d bytes", 10).Error(), "too_large: over 10 bytes"; got != want {
		t.Errorf("E(...).Error() = %q, want %q", got, want)
	}

	names := map[Kind]string{
		KindInternal: "internal", KindInvalid: "invalid", KindSchema: "schema", KindNotFound: "not found",
		KindConflict: "conflict", KindUnauthorized: "unauthorized", KindForbidden: "forbidden",
		KindTooLarge: "too large", KindUnavailable: "unavailable", Kind(99): "internal",
	}
	for k, want := range names {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", int(k), got, want)
		}
	}
}
