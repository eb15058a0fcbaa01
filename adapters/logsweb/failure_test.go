package logsweb_test

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/taskhoster/taskhoster/adapters/logsweb"
	"github.com/taskhoster/taskhoster/adapters/sqlitelogs"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/domain/tasklog"
)

// failures is a mirror where task A is given back with a reason (archived
// as error.json), claimed again and ends a dead letter, and B times out.
func failures(t testing.TB) *sqlitelogs.Store {
	t.Helper()
	failed := func(l tasklog.Line, code string) tasklog.Line {
		l.Status, l.Error = domain.Failed, code
		return l
	}
	lines := []tasklog.Line{
		mk(0, idA, domain.EventPosted, "", tasklog.Sizes{Item: 74}),
		mk(10, idA, domain.EventClaimed, "box-1", tasklog.Sizes{Item: 74}),
		mk(20, idA, domain.EventReleased, "box-1", tasklog.Sizes{Item: 74, Error: 45}, "error"),
		mk(30, idA, domain.EventClaimed, "box-2", tasklog.Sizes{Item: 74, Error: 45}),
		failed(mk(40, idA, domain.EventFailed, "box-2", tasklog.Sizes{Item: 74, Error: 45}, "error"), domain.AttemptsError),
		failed(mk(50, idB, domain.EventTimeout, "", tasklog.Sizes{Item: 31, Error: 9}, "error"), domain.TimeoutError),
	}
	return mirror(t, lines, func(w *sqlitelogs.Store, ref tasklog.PayloadRef) error {
		return w.SavePayload(context.Background(), ref, []byte(`{"exitCode":3,"stderr":"<disk> full"}`))
	})
}

// rows are the rows of a page's table body: each row's class and its text
// without tags, spaces squeezed.
func rows(body string) [][2]string {
	tags := regexp.MustCompile(`<[^>]*>`)
	var out [][2]string
	for _, m := range regexp.MustCompile(`(?s)<tr class="([^"]*)">(.*?)</tr>`).FindAllStringSubmatch(body, -1) {
		out = append(out, [2]string{m[1], strings.Join(strings.Fields(tags.ReplaceAllString(m[2], " ")), " ")})
	}
	return out
}

// row is what a row of the list must be: its class, and text it holds.
type row struct{ class, text string }

// listRows gets the list of h and checks it has n rows, the first ones as
// want says; it returns the page and its rows.
func listRows(t *testing.T, h http.Handler, n int, want ...row) (page, [][2]string) {
	t.Helper()
	p := get(t, h, "/")
	if p.status != http.StatusOK {
		t.Fatalf("GET /: %d\n%s", p.status, p.body)
	}
	got := rows(p.body)
	if len(got) != n {
		t.Fatalf("%d rows, want %d:\n%s", len(got), n, p.body)
	}
	for i, w := range want {
		if got[i][0] != w.class || !strings.Contains(got[i][1], w.text) {
			t.Errorf("row %d: class %q, text %q; want class %q with %q", i, got[i][0], got[i][1], w.class, w.text)
		}
	}
	return p, got
}

func TestFailuresStandOutByWordAndColour(t *testing.T) {
	h := logsweb.New(failures(t), nil)
	p, got := listRows(t, h, 6,
		row{"event failure", "FAILED ✗ timeout"},
		row{"event failure", "FAILED ✗ failed error: attempts"},
		row{"event", "claimed"},
		row{"event giveback", "↺ released given back"})
	if strings.Contains(got[0][1], "error: timeout") {
		t.Errorf("a timeout says its code twice: %q", got[0][1])
	}
	if !strings.Contains(p.body, "<option>released</option>") || !strings.Contains(p.body, "<option>attempts</option>") {
		t.Errorf("the filters do not offer released and attempts")
	}
	// The one script is this server's; nothing inline may run.
	if csp := p.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") ||
		!strings.Contains(csp, "; script-src 'self';") {
		t.Errorf("CSP %q", csp)
	}
	if strings.Count(p.body, "<script") != 1 || !strings.Contains(p.body, liveScript) {
		t.Errorf("the page has a script other than live.js")
	}
}

func TestListFiltersByTheNewEventsAndErrors(t *testing.T) {
	h := logsweb.New(failures(t), nil)
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"event=released", []string{idA}},
		{"error=attempts", []string{idA}},
		{"error=timeout", []string{idB}},
		{"error=failed", nil},
		{"event=failed&error=attempts", []string{idA}},
	} {
		t.Run(tc.query, func(t *testing.T) {
			p := get(t, h, "/?"+tc.query)
			if p.status != http.StatusOK {
				t.Fatalf("%d\n%s", p.status, p.body)
			}
			if got := taskLinks(p.body); strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("task links %v, want %v", got, tc.want)
			}
			if !strings.Contains(p.body, "<option selected>") {
				t.Errorf("the filter is not shown back as chosen")
			}
		})
	}
	if p := get(t, h, "/?error=%3Cb%3E"); p.status != http.StatusBadRequest {
		t.Errorf("an error code that is not a word: %d", p.status)
	}
}

func TestTrailShowsGiveBacksAndFailures(t *testing.T) {
	h := logsweb.New(failures(t), nil)
	p := get(t, h, "/tasks/"+host+"/"+queue+"/"+idA)
	if p.status != http.StatusOK {
		t.Fatalf("%d\n%s", p.status, p.body)
	}
	var trail []string
	for _, r := range rows(p.body) {
		trail = append(trail, r[0]+": "+strings.Fields(r[1])[2])
	}
	want := "event: posted|event: claimed|event giveback: ↺|event: claimed|event failure: FAILED"
	if got := strings.Join(trail, "|"); got != want {
		t.Errorf("trail %q, want %q", got, want)
	}
	if !strings.Contains(p.body, "error: attempts") || !strings.Contains(p.body, `<td class="num">45</td>`) {
		t.Errorf("the dead letter's code or the reason's size is missing")
	}
	// The reason given back is archived as error.json: linked, not inline.
	if !strings.Contains(p.body, `href="/payloads/task.example.com/resize/`+idA+`/error.json" target="_blank"`) ||
		strings.Contains(p.body, "disk") {
		t.Errorf("error.json is not linked, or is inline")
	}
}

// TestCancelsAndRetriesStandOut: a cancelled task is shown as a failure (a
// word and a colour, its code not said twice), a retry stands out too, and
// both are filtered by.
func TestCancelsAndRetriesStandOut(t *testing.T) {
	cancelled := mk(20, idA, domain.EventCancelled, "box-1", tasklog.Sizes{Item: 74, Error: 11})
	cancelled.Status, cancelled.Error = domain.Failed, domain.CancelledError
	retried := mk(30, idA, domain.EventRetried, "", tasklog.Sizes{Item: 74})
	retried.Status, retried.Attempts = domain.Pending, 0
	h := logsweb.New(mirror(t, []tasklog.Line{
		mk(0, idA, domain.EventPosted, "", tasklog.Sizes{Item: 74}),
		mk(10, idA, domain.EventClaimed, "box-1", tasklog.Sizes{Item: 74}),
		cancelled, retried,
		mk(40, idB, domain.EventPosted, "", tasklog.Sizes{Item: 31}),
	}, nil), nil)

	p, got := listRows(t, h, 5,
		row{"event", "posted"},
		row{"event retried", "↻ retried back to pending"},
		row{"event failure", "✗ cancelled"})
	if strings.Contains(got[2][1], "error: cancelled") {
		t.Errorf("a cancel says its code twice: %q", got[2][1])
	}
	for _, opt := range []string{"<option>cancelled</option>", "<option>retried</option>"} {
		if strings.Count(p.body, opt) < 1 {
			t.Errorf("the filters do not offer %s", opt)
		}
	}
	for query, want := range map[string]string{
		"event=cancelled": idA, "error=cancelled": idA, "event=retried": idA,
		"event=cancelled&error=cancelled": idA, "event=retried&error=cancelled": "",
	} {
		p := get(t, h, "/?"+query)
		if p.status != http.StatusOK {
			t.Fatalf("%s: %d\n%s", query, p.status, p.body)
		}
		if got := strings.Join(taskLinks(p.body), " "); got != want {
			t.Errorf("%s: task links %q, want %q", query, got, want)
		}
	}

	p = get(t, h, "/tasks/"+host+"/"+queue+"/"+idA)
	var trail []string
	for _, r := range rows(p.body) {
		trail = append(trail, r[0])
	}
	if want := "event|event|event failure|event retried"; strings.Join(trail, "|") != want {
		t.Errorf("trail %q, want %q", strings.Join(trail, "|"), want)
	}
}
