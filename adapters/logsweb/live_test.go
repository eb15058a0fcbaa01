package logsweb_test

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/taskhoster/taskhoster/adapters/logsweb"
	"github.com/taskhoster/taskhoster/adapters/sqlitelogs"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/domain/tasklog"
)

// TestListCountsOffersNamesAndFiltersByPrefix: the list says how many
// events match, offers the hosts and queues the mirror knows, and a value
// ending in * filters by prefix.
func TestListCountsOffersNamesAndFiltersByPrefix(t *testing.T) {
	h := logsweb.New(fixture(t), nil)
	p := get(t, h, "/")
	for _, want := range []string{
		`<p class="count" id="count" data-swap>7 events match.`,
		`<datalist id="hosts"><option value="task.example.com"></datalist>`,
		`<datalist id="queues"><option value="resize"></datalist>`,
		`<input name="queue" id="queue" value="" size="12" list="queues"`,
	} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the list lacks %s", want)
		}
	}
	p = get(t, h, "/?id=9f2c*&queue=res*&limit=2")
	if p.status != http.StatusOK {
		t.Fatalf("%d\n%s", p.status, p.body)
	}
	// A page of 2 of the 5 events of A: the count is of every match.
	if ids := taskLinks(p.body); len(ids) != 2 || ids[0] != idA || ids[1] != idA {
		t.Errorf("prefix filter shows %v", ids)
	}
	if !strings.Contains(p.body, `5 events match the filter.`) {
		t.Errorf("the count of a filter:\n%s", p.body)
	}
	if p := get(t, h, "/?queue=Re*"); p.status != http.StatusBadRequest || !strings.Contains(p.body, "nor the start of one followed by *") {
		t.Errorf("a prefix no name starts with: %d", p.status)
	}
}

// TestTaskPageShowsWaitAndRun: posted at 0 s, claimed at 20 s, its result
// at 40 s: it waited 20 s and ran 20 s.
func TestTaskPageShowsWaitAndRun(t *testing.T) {
	h := logsweb.New(fixture(t), nil)
	p := get(t, h, "/tasks/"+host+"/"+queue+"/"+idA)
	for _, want := range []string{
		`<dd id="waited">20s <span class="muted">posted → first claim</span></dd>`,
		`<dd id="ran">20s <span class="muted">claim → end</span></dd>`,
		`<dd id="total">40s <span class="muted">posted → end</span></dd>`,
	} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the task page lacks %s", want)
		}
	}
	// B was claimed and has not ended.
	p = get(t, h, "/tasks/"+host+"/"+queue+"/"+idB)
	if !strings.Contains(p.body, `<dd id="waited">40s`) || !strings.Contains(p.body, "not ended (as far as the mirror knows)") {
		t.Errorf("B's timing:\n%s", p.body)
	}
}

// TestLiveSaysWhenLinesArrive: /live says the newest line's number at once
// and again when a pull stores more; Close ends the stream.
func TestLiveSaysWhenLinesArrive(t *testing.T) {
	ctx := context.Background()
	w, h, srv := oneLineMirror(t)

	if p := get(t, h, "/"); !strings.Contains(p.body, `data-latest="1" data-follow="yes"`) {
		t.Errorf("the first page does not follow from line 1")
	}
	if p := get(t, h, "/?before=1-1"); !strings.Contains(p.body, `data-follow="no"`) {
		t.Errorf("an older page follows")
	}
	js := get(t, h, "/live.js")
	if js.header.Get("Content-Type") != "text/javascript; charset=utf-8" || !strings.Contains(js.body, `new EventSource("/live")`) {
		t.Errorf("live.js: %s", js.header.Get("Content-Type"))
	}

	resp, err := http.Get(srv.URL + "/live")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	events := bufio.NewScanner(resp.Body)
	next := func() string {
		t.Helper()
		for events.Scan() {
			if data, ok := strings.CutPrefix(events.Text(), "data: "); ok {
				return data
			}
		}
		return "end: " + errString(events.Err())
	}
	if got := next(); got != "1" {
		t.Fatalf("first event %q, want 1", got)
	}
	if _, err := w.Commit(ctx, host, "2026-07-26", tasklog.Cursor{Offset: 30}, []tasklog.Line{
		mk(10, idA, domain.EventClaimed, "box", tasklog.Sizes{}), mk(20, idA, domain.EventResult, "box", tasklog.Sizes{}),
	}); err != nil {
		t.Fatal(err)
	}
	if got := next(); !regexp.MustCompile(`^[0-9]+$`).MatchString(got) || got == "1" {
		t.Fatalf("after a pull: %q, want the newest line's number", got)
	}
	h.Close()
	if got := next(); got != "end: <nil>" {
		t.Errorf("after Close: %q, want the stream's end", got)
	}
}

// oneLineMirror is a mirror holding one posted line, and its pages served
// over loopback: the store to pull more into, the pages and their server.
// All three close when the test ends.
func oneLineMirror(t *testing.T) (*sqlitelogs.Store, *logsweb.Handler, *httptest.Server) {
	t.Helper()
	dir := t.TempDir()
	w, err := sqlitelogs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	if _, err := w.Commit(context.Background(), host, "2026-07-26", tasklog.Cursor{Offset: 10}, []tasklog.Line{mk(0, idA, domain.EventPosted, "", tasklog.Sizes{})}); err != nil {
		t.Fatal(err)
	}
	r, err := sqlitelogs.OpenReader(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	h := logsweb.New(r, func(err error) { t.Errorf("onError: %v", err) })
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Cleanup(h.Close) // before the server's: a live stream would hold it open
	return w, h, srv
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
