package dashboard_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/taskhoster/taskhoster/adapters/clock"
	"github.com/taskhoster/taskhoster/adapters/eventlog"
	"github.com/taskhoster/taskhoster/adapters/httpapi"
	"github.com/taskhoster/taskhoster/domain"
)

// chromium is Debian's Chromium, as in tests/e2e.
const chromium = "/usr/bin/chromium"

// openPage opens base in headless Chromium and returns its tab.
func openPage(t *testing.T, base string) context.Context {
	t.Helper()
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("SKIP: the browser test needs Chromium at %s (apt-get install chromium): %v", chromium, err)
	}
	deadline, stop := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(stop)
	alloc, cancel := chromedp.NewExecAllocator(deadline,
		chromedp.ExecPath(chromium), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()),
	)
	t.Cleanup(cancel)
	tab, cancelTab := chromedp.NewContext(alloc)
	t.Cleanup(cancelTab)
	if err := chromedp.Do(tab, chromedp.Navigate(base)); err != nil {
		t.Fatalf("open %s: %v", base, err)
	}
	return tab
}

// waitFor waits until expr holds in the page, for at most 20 s.
func waitFor(t *testing.T, tab context.Context, what, expr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, 20*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr)); err != nil {
		t.Fatalf("waiting for %s (%s): %v", what, expr, err)
	}
}

// A page whose live socket was down for longer than a snapshot's few
// seconds of rates still counts what was posted meanwhile once it is back:
// the chart has no hole where the outage was.
func TestReconnectKeepsTheRatesOfTheOutage(t *testing.T) {
	clk := clock.NewFake(time.Now())
	f := newFixtureOn(t, clk)
	var down atomic.Bool // refuse the live socket while the network is "down"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() && r.URL.Path == "/_dash/live" {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		f.api.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	// NAME.localhost reaches the host NAME; Chromium resolves it to loopback.
	base := "http://" + testHost + ".localhost:" + srv.URL[strings.LastIndexByte(srv.URL, ':')+1:] + "/_dash/"
	tab := openPage(t, base)
	spark := `document.querySelector('.queue[data-queue="open"] svg.sparkline').getAttribute("aria-label")`
	waitFor(t, tab, "the live socket", `!!document.querySelector(".live.on")`)
	waitFor(t, tab, "the open queue's sparkline", spark+`.startsWith("last hour: 0 posted")`)

	down.Store(true)
	if err := chromedp.Do(tab, chromedp.Evaluate[chromedp.Void](`state.socket.close()`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, tab, "the page to see the socket gone", `!!document.querySelector(".live.off")`)
	for range 3 {
		f.post(t, "open")
	}
	clk.Advance(10 * time.Second) // longer than a snapshot's rates
	down.Store(false)
	waitFor(t, tab, "the live socket back", `!!document.querySelector(".live.on")`)
	waitFor(t, tab, "the live socket's figures", `document.querySelector('.queue[data-queue="open"] td.claimable').textContent === "3"`)

	ctx, cancel := context.WithTimeout(tab, 20*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](spark+`.startsWith("last hour: 3 posted")`)); err != nil {
		label, _ := chromedp.Run(tab, chromedp.Evaluate[string](spark))
		t.Fatalf("after the outage the sparkline says %q, want 3 posted: %v", label, err)
	}
}

// A task's page reads its trail from the log API page by page. A page can
// hold none of the viewer's lines (the day file is shared by every host of
// the server, and by queues the viewer may not read) and still not be the
// end: the trail goes on from X-Next-Offset, and finds the task's lines
// that lie past 4 MiB of another host's.
func TestTrailReadsPastPagesOfOtherHostsLines(t *testing.T) {
	f := newFixture(t)
	task := f.post(t, "ops")
	logs := t.TempDir()
	var file bytes.Buffer
	other := task
	other.Host, other.Queue = "other.example.com", "busy"
	for i := 0; file.Len() <= 5<<20; i++ {
		other.ID = fmt.Sprintf("%016x", i)
		file.Write(eventlog.EncodeLine(domain.Event{Kind: domain.EventPosted, At: time.UnixMilli(task.PostedAt), Task: other}, nil))
	}
	file.Write(eventlog.EncodeLine(domain.Event{Kind: domain.EventPosted, At: time.UnixMilli(task.PostedAt), Task: task}, nil))
	writeDay(t, logs, time.UnixMilli(task.PostedAt), file.Bytes())
	tab := openTask(t, serveLogs(t, f, logs, nil).base, task.ID, "")
	waitFor(t, tab, "the trail read", `(document.getElementById("trail")?.textContent ?? "Loading…") !== "Loading…"`)
	got, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.getElementById("trail").textContent`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "posted") {
		t.Errorf("the trail of a task whose lines lie past 4 MiB of another host's shows %q, want its posted line", got)
	}
}

// logServer serves f's API with a log API over the logs folder, and
// records the offsets the page asks the day files from, in order. Each
// read from an offset other than 0 first passes gate (nil: none).
type logServer struct {
	base string

	mu      sync.Mutex
	offsets []int64
}

func serveLogs(t *testing.T, f *fixture, logs string, gate <-chan struct{}) *logServer {
	t.Helper()
	api := httpapi.New(f.svc, f.config, httpapi.Options{Dashboard: f.dash, Logs: eventlog.NewReader(logs)})
	s := &logServer{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/_logs/tasks/") {
			offset, _ := strconv.ParseInt(r.URL.Query().Get("offset"), 10, 64)
			s.mu.Lock()
			s.offsets = append(s.offsets, offset)
			s.mu.Unlock()
			if offset != 0 && gate != nil {
				select {
				case <-gate:
				case <-r.Context().Done():
					return
				}
			}
		}
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	s.base = "http://" + testHost + ".localhost:" + srv.URL[strings.LastIndexByte(srv.URL, ':')+1:] + "/_dash/"
	return s
}

func (s *logServer) asked() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int64(nil), s.offsets...)
}

// writeDay writes the day file of at in the logs folder, and returns its path.
func writeDay(t *testing.T, logs string, at time.Time, content []byte) string {
	t.Helper()
	path := filepath.Join(logs, "tasks", eventlog.DayOf(at)+".jsonl")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, content, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// openTask signs alice in on a new tab, lets do change the page's state
// (a test's hooks), and opens the page of task id on the queue ops.
func openTask(t *testing.T, base, id, do string) context.Context {
	t.Helper()
	tab := openPage(t, base)
	if err := chromedp.Do(tab,
		chromedp.SendKeys(chromedp.CSS(`#token`), aliceToken),
		chromedp.Click(chromedp.CSS(`#signin-button`))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, tab, "the sign-in", `!document.getElementById("whoami").hidden`)
	if do != "" {
		if err := chromedp.Do(tab, chromedp.Evaluate[chromedp.Void](do)); err != nil {
			t.Fatal(err)
		}
	}
	if err := chromedp.Do(tab, chromedp.Navigate(base+"#/q/ops/t/"+id)); err != nil {
		t.Fatal(err)
	}
	return tab
}

// A task's page refreshes its trail on every change of the queue (up to
// four a second on a busy one). A refresh reads the day file only from
// where the last read ended, not the whole day again, and still shows the
// lines written since.
func TestTrailRefreshReadsOnlyWhatIsNew(t *testing.T) {
	f := newFixture(t)
	task := f.post(t, "ops")
	at := time.UnixMilli(task.PostedAt)
	logs := t.TempDir()
	posted := eventlog.EncodeLine(domain.Event{Kind: domain.EventPosted, At: at, Task: task}, nil)
	path := writeDay(t, logs, at, posted)
	s := serveLogs(t, f, logs, nil)

	tab := openTask(t, s.base, task.ID, "")
	waitFor(t, tab, "the live socket", `!!document.querySelector(".live.on")`)
	waitFor(t, tab, "the first read", `!!document.querySelector('#trail tr.event[data-event="posted"]')`)
	day, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	claimed := task
	claimed.Status, claimed.Attempts = domain.Processing, 1
	if _, err := day.Write(eventlog.EncodeLine(domain.Event{Kind: domain.EventClaimed, At: at, Task: claimed, Worker: "w1"}, nil)); err != nil {
		t.Fatal(err)
	}
	if err := day.Close(); err != nil {
		t.Fatal(err)
	}
	f.post(t, "ops") // a change of the queue: the page refreshes the trail
	waitFor(t, tab, "the refresh to show the new line", `!!document.querySelector('#trail tr.event[data-event="claimed"]')`)

	asked := s.asked()
	fromStart, fromEnd := 0, 0
	for _, o := range asked {
		switch o {
		case 0:
			fromStart++
		case int64(len(posted)):
			fromEnd++
		}
	}
	if fromStart != 1 || fromEnd == 0 || fromStart+fromEnd != len(asked) {
		t.Errorf("the page asked the day file from offsets %v; want 0 once, then only from %d where the first read ended", asked, len(posted))
	}
}

// A day file longer than one read's bound is read in full over successive
// reads, each going on from where the last stopped, and the page says the
// trail is still being read meanwhile. (The bound is made one page of
// 4 MiB here, so a day of 9 MiB takes three reads.)
func TestTrailReadsALongDayOverSuccessiveReads(t *testing.T) {
	f := newFixture(t)
	task := f.post(t, "ops")
	at := time.UnixMilli(task.PostedAt)
	var file bytes.Buffer
	other := task
	other.Host, other.Queue = "other.example.com", "busy"
	for i := 0; file.Len() <= 9<<20; i++ {
		other.ID = fmt.Sprintf("%016x", i)
		file.Write(eventlog.EncodeLine(domain.Event{Kind: domain.EventPosted, At: at, Task: other}, nil))
	}
	file.Write(eventlog.EncodeLine(domain.Event{Kind: domain.EventPosted, At: at, Task: task}, nil))
	logs := t.TempDir()
	writeDay(t, logs, at, file.Bytes())
	gate := make(chan struct{})
	s := serveLogs(t, f, logs, gate)
	var open sync.Once
	t.Cleanup(func() { open.Do(func() { close(gate) }) })

	tab := openTask(t, s.base, task.ID, `state.trailPages = 1`)
	// The second page waits at the gate: the first read has stopped at its
	// bound, and the page must say the trail is not all there yet.
	waitFor(t, tab, "the note that the trail is still being read", `!!document.getElementById("trail-reading")`)
	open.Do(func() { close(gate) })
	waitFor(t, tab, "the task's line past 8 MiB", `!!document.querySelector('#trail tr.event[data-event="posted"]')`)
	waitFor(t, tab, "the note gone", `!document.getElementById("trail-reading")`)

	asked := s.asked()
	if len(asked) < 3 || asked[0] != 0 {
		t.Fatalf("the page asked the day file from offsets %v; want 0, then on page by page", asked)
	}
	for i := 1; i < len(asked); i++ {
		if asked[i] <= asked[i-1] {
			t.Errorf("the page asked the day file from offsets %v; want each read to go on from where the last stopped, none read twice", asked)
			break
		}
	}
}
