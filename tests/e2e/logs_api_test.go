package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// A second host, with its own user and queue, whose lines share the day
// files with the fixture host's and must never be served on it.
const (
	otherHost  = "other.example.com"
	olgaToken  = "0f9a0000000000000000000000000f9a"
	itemPosted = `{"url":"https://ex.com/a.png","width":800}`
	resultSent = `{"url":"https://ex.com/a.jpg"}`
)

// logQueues adds to the fixture:
//   - archived: payloads archived, logs for alice only;
//   - evelogs: payloads archived, logs for eve only;
//
// and the host other.example.com with the user olga and her queue theirs.
func logQueues(t *testing.T, d dirs) {
	t.Helper()
	queues := filepath.Join(d.hosts, host, "taskhoster-queues")
	writeFile(t, filepath.Join(queues, "archived.json"), `{
		"item": {"type":"object"},
		"settings": {"taskhoster-archivePayloads": true},
		"access": {"post":["alice"], "status":["alice"], "work":["box"], "logs":["alice"]}
	}`)
	writeFile(t, filepath.Join(queues, "evelogs.json"), `{
		"item": {},
		"settings": {"taskhoster-archivePayloads": true},
		"access": {"post":["alice"], "status":["alice"], "work":["box"], "logs":["eve"]}
	}`)
	writeFile(t, filepath.Join(d.hosts, otherHost, "taskhoster-users", "olga.json"), `{"name":"olga","token":"`+olgaToken+`"}`)
	writeFile(t, filepath.Join(d.hosts, otherHost, "taskhoster-queues", "theirs.json"), `{
		"item": {},
		"settings": {"taskhoster-archivePayloads": true},
		"access": {"post":"public", "work":"public", "logs":["olga"]}
	}`)
}

// work claims the oldest task of queue as box-1, reports each progress and
// posts result, checking each answer.
func (s *server) work(hostHeader, queue, token string, progress []string, result string) string {
	s.t.Helper()
	r := s.doHost("POST", "/"+queue+"/claim", hostHeader, token, `{"worker":"box-1"}`)
	if r.Status != http.StatusOK {
		s.t.Fatalf("claim %s: %d %s", queue, r.Status, r.Body)
	}
	id := r.JSON(s.t)["id"].(string)
	for _, p := range progress {
		r := s.doHost("POST", "/"+queue+"/"+id+"/progress", hostHeader, token, `{"worker":"box-1","progress":`+p+`}`)
		if r.Status != http.StatusOK || r.JSON(s.t)["accepted"] != true {
			s.t.Fatalf("progress %s: %d %s", queue, r.Status, r.Body)
		}
	}
	r = s.doHost("POST", "/"+queue+"/"+id+"/result", hostHeader, token, `{"worker":"box-1","result":`+result+`}`)
	if r.Status != http.StatusOK || r.JSON(s.t)["accepted"] != true {
		s.t.Fatalf("result %s: %d %s", queue, r.Status, r.Body)
	}
	return id
}

// logLinesOf reads every line of day the API gives from offset, asking again
// from X-Next-Offset until it stops moving, and returns them with the final
// offset.
func (s *server) logLinesOf(hostHeader, token, day string, offset int64) (string, int64) {
	s.t.Helper()
	var all strings.Builder
	for {
		r := s.doHost("GET", fmt.Sprintf("/_logs/tasks/%s?offset=%d", day, offset), hostHeader, token, "")
		if r.Status != http.StatusOK {
			s.t.Fatalf("read %s from %d: %d %s", day, offset, r.Status, r.Body)
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/x-ndjson" {
			s.t.Errorf("Content-Type %q", ct)
		}
		next, err := strconv.ParseInt(r.Header.Get("X-Next-Offset"), 10, 64)
		if err != nil {
			s.t.Fatalf("X-Next-Offset %q: %v", r.Header.Get("X-Next-Offset"), err)
		}
		all.Write(r.Body)
		if next == offset {
			return all.String(), next
		}
		offset = next
	}
}

// dayLines is what the day file holds for host's queues, line by line as
// stored, and the file's size.
func (s *server) dayLines(day, host string, queues ...string) (string, int64) {
	s.t.Helper()
	data, err := os.ReadFile(filepath.Join(s.log, "tasks", day+".jsonl"))
	if err != nil {
		s.t.Fatal(err)
	}
	var want strings.Builder
	for _, line := range bytes.SplitAfter(data, []byte("\n")) {
		var ev struct{ Host, Queue string }
		if len(line) == 0 || json.Unmarshal(line, &ev) != nil {
			continue
		}
		for _, q := range queues {
			if ev.Host == host && ev.Queue == q {
				want.Write(line)
			}
		}
	}
	return want.String(), int64(len(data))
}

// TestLogAPI reads the event log and the archive over HTTP as users with
// different logs access on two hosts, and checks each answer against the
// files on disc.
func TestLogAPI(t *testing.T) {
	t.Parallel()
	d := newDirs(t)
	logQueues(t, d)
	s := start(t, d)

	// On task.example.com: a finished and a pending task in archived, a
	// finished one in evelogs, one in resize (logs for alice, no archive).
	done := s.post("archived", aliceToken, itemPosted)
	if got := s.work(host, "archived", boxToken, []string{`{"percent":40}`, `{"percent":80}`}, resultSent); got != done {
		t.Fatalf("claimed %s, want %s", got, done)
	}
	pending := s.post("archived", aliceToken, `{"url":"https://ex.com/b.png"}`)
	evesTask := s.post("evelogs", aliceToken, `{"for":"eve"}`)
	s.work(host, "evelogs", boxToken, nil, `{"ok":true}`)
	resized := s.post("resize", aliceToken, `{"url":"https://ex.com/c.png"}`)
	// On other.example.com.
	if r := s.doHost("POST", "/theirs", otherHost, "", `{"secret":"olga's"}`); r.Status != http.StatusCreated {
		t.Fatalf("post theirs: %d %s", r.Status, r.Body)
	}
	s.work(otherHost, "theirs", "", nil, `{"ok":"olga"}`)

	// Reading the log must not read a task: keep the finished task's file.
	doneFile := s.taskFile("archived", "done", done)
	before, err := os.ReadFile(doneFile)
	if err != nil {
		t.Fatal(err)
	}

	// The day list: every day file and its size, as on disc.
	r := s.do("GET", "/_logs/tasks", aliceToken, "")
	if r.Status != http.StatusOK {
		t.Fatalf("day list: %d %s", r.Status, r.Body)
	}
	var days []struct {
		Day  string `json:"day"`
		Size int64  `json:"size"`
	}
	if err := json.Unmarshal(r.Body, &days); err != nil {
		t.Fatalf("day list %s: %v", r.Body, err)
	}
	files, _ := filepath.Glob(filepath.Join(s.log, "tasks", "*.jsonl"))
	if len(days) == 0 || len(days) != len(files) {
		t.Fatalf("day list %s for the files %v", r.Body, files)
	}
	for i, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if days[i].Day+".jsonl" != filepath.Base(f) || days[i].Size != fi.Size() {
			t.Errorf("day %d = %+v, file %s has %d bytes", i, days[i], f, fi.Size())
		}
	}
	today := days[len(days)-1].Day

	// Each user reads exactly the lines of this host's queues whose logs
	// they may read, as stored; the offset ends at the end of the file.
	for _, c := range []struct {
		user, hostHeader, token string
		queues                  []string
	}{
		{"alice", host, aliceToken, []string{"archived", "resize"}},
		{"eve", host, eveToken, []string{"evelogs"}},
		{"olga", otherHost, olgaToken, []string{"theirs"}},
	} {
		got, next := s.logLinesOf(c.hostHeader, c.token, today, 0)
		want, size := s.dayLines(today, c.hostHeader, c.queues...)
		if want == "" {
			t.Fatalf("the day file holds no line of %s's queues", c.user)
		}
		if got != want {
			t.Errorf("%s's lines\n got %s\nwant %s", c.user, got, want)
		}
		if next != size {
			t.Errorf("%s's X-Next-Offset %d, want the file size %d", c.user, next, size)
		}
		// From there, nothing new, and the offset stays.
		r := s.doHost("GET", fmt.Sprintf("/_logs/tasks/%s?offset=%d", today, next), c.hostHeader, c.token, "")
		if r.Status != http.StatusOK || len(r.Body) != 0 || r.Header.Get("X-Next-Offset") != strconv.FormatInt(next, 10) {
			t.Errorf("%s reading again: %d %q, X-Next-Offset %q", c.user, r.Status, r.Body, r.Header.Get("X-Next-Offset"))
		}
	}

	// Alice's lines of the archived task list what each event archived.
	aliceLines, size := s.logLinesOf(host, aliceToken, today, 0)
	var trail []string
	for _, line := range strings.SplitAfter(aliceLines, "\n") {
		var ev struct {
			ID, Event string
			Archived  []string
		}
		if line == "" || json.Unmarshal([]byte(line), &ev) != nil || ev.ID != done {
			continue
		}
		trail = append(trail, ev.Event+" "+strings.Join(ev.Archived, ","))
	}
	if diff := cmp.Diff([]string{"posted item", "claimed ", "progress progress", "progress progress", "result result"}, trail); diff != "" {
		t.Errorf("events of %s with what they archived (-want +got):\n%s", done, diff)
	}
	if !strings.Contains(aliceLines, `"id":"`+resized+`"`) || !strings.Contains(aliceLines, `"id":"`+pending+`"`) {
		t.Errorf("alice's lines miss resize's or the pending task's post: %s", aliceLines)
	}

	// Offsets that are no line start, or no offset at all.
	for _, offset := range []string{"1", strconv.FormatInt(size-1, 10), strconv.FormatInt(size+1, 10), "-1", "abc", "1e3"} {
		r := s.do("GET", "/_logs/tasks/"+today+"?offset="+offset, aliceToken, "")
		if r.Status != http.StatusBadRequest || r.JSON(t)["error"] != "invalid_offset" {
			t.Errorf("offset %s: %d %s", offset, r.Status, r.Body)
		}
	}

	// The archived bodies, byte for byte.
	for _, c := range []struct{ file, want, contentType string }{
		{"item.json", itemPosted, "application/json"},
		{"progress.jsonl", `{"percent":40}` + "\n" + `{"percent":80}` + "\n", "application/x-ndjson"},
		{"result.json", resultSent, "application/json"},
	} {
		r := s.do("GET", "/_logs/payloads/archived/"+done+"/"+c.file, aliceToken, "")
		if r.Status != http.StatusOK || string(r.Body) != c.want {
			t.Errorf("%s: %d %q, want %q", c.file, r.Status, r.Body, c.want)
		}
		if ct := r.Header.Get("Content-Type"); ct != c.contentType {
			t.Errorf("%s: Content-Type %q, want %q", c.file, ct, c.contentType)
		}
	}
	if r := s.do("GET", "/_logs/payloads/evelogs/"+evesTask+"/item.json", eveToken, ""); r.Status != http.StatusOK || string(r.Body) != `{"for":"eve"}` {
		t.Errorf("eve's item: %d %s", r.Status, r.Body)
	}

	// Refusals.
	for _, c := range []struct {
		name, path, hostHeader, token string
		status                        int
		code                          string
	}{
		{"no token, day list", "/_logs/tasks", host, "", 401, "unauthorized"},
		{"unknown token, day list", "/_logs/tasks", host, "0000000000000000000000000000dead", 401, "unauthorized"},
		{"no logs anywhere, day list", "/_logs/tasks", host, boxToken, 403, "forbidden"},
		{"no token, lines", "/_logs/tasks/" + today, host, "", 401, "unauthorized"},
		{"no logs anywhere, lines", "/_logs/tasks/" + today, host, boxToken, 403, "forbidden"},
		{"another host's user", "/_logs/tasks", host, olgaToken, 401, "unauthorized"},
		{"unknown day", "/_logs/tasks/2001-01-01", host, aliceToken, 404, "not_found"},
		{"not a day", "/_logs/tasks/yesterday", host, aliceToken, 404, "not_found"},
		{"not a real day", "/_logs/tasks/2026-02-30", host, aliceToken, 404, "not_found"},
		{"no token, payload", "/_logs/payloads/archived/" + done + "/item.json", host, "", 401, "unauthorized"},
		{"another queue's reader", "/_logs/payloads/archived/" + done + "/item.json", host, eveToken, 403, "forbidden"},
		{"not archived yet", "/_logs/payloads/archived/" + pending + "/result.json", host, aliceToken, 404, "not_found"},
		{"no error body", "/_logs/payloads/archived/" + done + "/error.json", host, aliceToken, 404, "not_found"},
		{"queue without archive", "/_logs/payloads/resize/" + resized + "/item.json", host, aliceToken, 404, "not_found"},
		{"not a payload file", "/_logs/payloads/archived/" + done + "/task.json", host, aliceToken, 404, "not_found"},
		{"not an id", "/_logs/payloads/archived/..%2f" + done + "/item.json", host, aliceToken, 404, "not_found"},
		{"unknown queue", "/_logs/payloads/nope/" + done + "/item.json", host, aliceToken, 404, "unknown_queue"},
		{"another host's queue", "/_logs/payloads/theirs/" + done + "/item.json", host, aliceToken, 404, "unknown_queue"},
	} {
		r := s.doHost("GET", c.path, c.hostHeader, c.token, "")
		if r.Status != c.status || r.JSON(t)["error"] != c.code {
			t.Errorf("%s: %d %s, want %d %s", c.name, r.Status, r.Body, c.status, c.code)
		}
		if c.status == 401 && !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: WWW-Authenticate %q", c.name, r.Header.Get("WWW-Authenticate"))
		}
	}
	if r := s.do("POST", "/_logs/tasks", aliceToken, `{}`); r.Status != http.StatusMethodNotAllowed {
		t.Errorf("POST /_logs/tasks: %d %s", r.Status, r.Body)
	}

	// None of this read a task: the file is as it was, no fetched event,
	// and not one line was added by the reads.
	after, err := os.ReadFile(doneFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Errorf("reading the log changed the task file:\n%s\n%s", before, after)
	}
	if diff := cmp.Diff([]string{"posted", "claimed", "progress", "progress", "result"}, s.eventsOf(done)); diff != "" {
		t.Errorf("events of %s (-want +got):\n%s", done, diff)
	}
	if _, now := s.dayLines(today, host); now != size {
		t.Errorf("the day file grew from %d to %d bytes while only read", size, now)
	}
	if strings.Contains(s.Stderr(), aliceToken) || strings.Contains(s.Stderr(), eveToken) {
		t.Error("a token reached the server's log")
	}
}

// TestLogPruneAtStartUp starts a server with one day of logs over a day file
// and an archive from three days ago, and sees both go at the first sweep,
// while today's stay.
func TestLogPruneAtStartUp(t *testing.T) {
	t.Parallel()
	d := newDirs(t)
	logQueues(t, d)
	now := time.Now().UTC()
	old := now.AddDate(0, 0, -3)
	oldDay := filepath.Join(d.logs, "tasks", old.Format("2006-01-02")+".jsonl")
	// The day before today would go too, but near midnight "today" in the
	// test and in the server might differ: keep to days clearly in or out.
	todayDay := filepath.Join(d.logs, "tasks", now.Format("2006-01-02")+".jsonl")
	writeFile(t, oldDay, `{"host":"task.example.com","queue":"archived","id":"0000000000000001","event":"posted"}`+"\n")
	writeFile(t, todayDay, `{"host":"task.example.com","queue":"archived","id":"0000000000000002","event":"posted"}`+"\n")
	payloads := filepath.Join(d.logs, "tasks-payloads", host)
	oldTask := filepath.Join(payloads, "archived", "0000000000000001")
	goneQueue := filepath.Join(payloads, "removed-queue")
	freshTask := filepath.Join(payloads, "archived", "0000000000000002")
	for _, dir := range []string{oldTask, filepath.Join(goneQueue, "0000000000000003"), freshTask} {
		writeFile(t, filepath.Join(dir, "item.json"), `{}`)
		writeFile(t, filepath.Join(dir, "result.json"), `{}`)
	}
	for _, dir := range []string{oldTask, filepath.Join(goneQueue, "0000000000000003")} {
		for _, p := range []string{filepath.Join(dir, "item.json"), filepath.Join(dir, "result.json"), dir} {
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}

	s := start(t, d, "--log-days", "1")
	eventually(t, "the old day file and archives to be pruned", func() bool {
		return !exists(oldDay) && !exists(oldTask) && !exists(goneQueue)
	})
	for _, kept := range []string{todayDay, filepath.Join(freshTask, "item.json"), filepath.Join(freshTask, "result.json")} {
		if !exists(kept) {
			t.Errorf("%s was pruned", kept)
		}
	}
	// A pruned day is gone from the API too.
	if r := s.do("GET", "/_logs/tasks/"+old.Format("2006-01-02"), aliceToken, ""); r.Status != http.StatusNotFound {
		t.Errorf("pruned day: %d %s", r.Status, r.Body)
	}
	if r := s.do("GET", "/_logs/payloads/archived/0000000000000001/item.json", aliceToken, ""); r.Status != http.StatusNotFound {
		t.Errorf("pruned payload: %d %s", r.Status, r.Body)
	}
	if r := s.do("GET", "/_logs/payloads/archived/0000000000000002/item.json", aliceToken, ""); r.Status != http.StatusOK || string(r.Body) != `{}` {
		t.Errorf("kept payload: %d %s", r.Status, r.Body)
	}
}

// TestLogPayloadsRevalidateByContent: a body can change within the second
// its Last-Modified names (progress.jsonl grows with each report), so a
// client revalidating a body it holds (Cache-Control no-cache) must be
// told by an ETag that follows the body, or it would get 304 for a
// progress.jsonl that has grown.
func TestLogPayloadsRevalidateByContent(t *testing.T) {
	t.Parallel()
	d := newDirs(t)
	logQueues(t, d)
	s := start(t, d)
	id := s.post("archived", aliceToken, itemPosted)
	if r := s.do("POST", "/archived/claim", boxToken, `{"worker":"box-1"}`); r.Status != http.StatusOK {
		t.Fatalf("claim: %d %s", r.Status, r.Body)
	}
	progress := func(p string) {
		t.Helper()
		if r := s.do("POST", "/archived/"+id+"/progress", boxToken, `{"worker":"box-1","progress":`+p+`}`); r.Status != http.StatusOK {
			t.Fatalf("progress: %d %s", r.Status, r.Body)
		}
	}
	path := "/_logs/payloads/archived/" + id + "/progress.jsonl"
	fetch := func(etag string) response {
		t.Helper()
		var h http.Header
		if etag != "" {
			h = http.Header{"If-None-Match": {etag}}
		}
		return s.doHeader("GET", path, host, aliceToken, "", h)
	}

	progress(`{"percent":40}`)
	first := fetch("")
	etag := first.Header.Get("ETag")
	if first.Status != http.StatusOK || etag == "" {
		t.Fatalf("first fetch: %d, ETag %q; want 200 with an ETag", first.Status, etag)
	}
	if r := fetch(etag); r.Status != http.StatusNotModified {
		t.Errorf("the same body revalidated: %d, want 304", r.Status)
	}
	progress(`{"percent":80}`)
	grown := fetch(etag)
	if want := `{"percent":40}` + "\n" + `{"percent":80}` + "\n"; grown.Status != http.StatusOK || string(grown.Body) != want {
		t.Errorf("the grown body revalidated: %d %q, want 200 %q", grown.Status, grown.Body, want)
	}
	if next := grown.Header.Get("ETag"); next == "" || next == etag {
		t.Errorf("the grown body's ETag %q, want a new one (was %q)", next, etag)
	}
}
