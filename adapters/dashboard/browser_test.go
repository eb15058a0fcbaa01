package dashboard_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
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
	day := eventlog.DayOf(time.UnixMilli(task.PostedAt))
	var file bytes.Buffer
	other := task
	other.Host, other.Queue = "other.example.com", "busy"
	for i := 0; file.Len() <= 5<<20; i++ {
		other.ID = fmt.Sprintf("%016x", i)
		file.Write(eventlog.EncodeLine(domain.Event{Kind: domain.EventPosted, At: time.UnixMilli(task.PostedAt), Task: other}, nil))
	}
	file.Write(eventlog.EncodeLine(domain.Event{Kind: domain.EventPosted, At: time.UnixMilli(task.PostedAt), Task: task}, nil))
	if err := os.MkdirAll(filepath.Join(logs, "tasks"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(logs, "tasks", day+".jsonl"), file.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	api := httpapi.New(f.svc, f.config, httpapi.Options{Dashboard: f.dash, Logs: eventlog.NewReader(logs)})
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)

	base := "http://" + testHost + ".localhost:" + srv.URL[strings.LastIndexByte(srv.URL, ':')+1:] + "/_dash/"
	tab := openPage(t, base)
	if err := chromedp.Do(tab,
		chromedp.SendKeys(chromedp.CSS(`#token`), aliceToken),
		chromedp.Click(chromedp.CSS(`#signin-button`))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, tab, "the sign-in", `!document.getElementById("whoami").hidden`)
	if err := chromedp.Do(tab, chromedp.Navigate(base+"#/q/ops/t/"+task.ID)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, tab, "the trail read", `(document.getElementById("trail")?.textContent ?? "Loading…") !== "Loading…"`)
	got, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.getElementById("trail").textContent`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "posted") {
		t.Errorf("the trail of a task whose lines lie past 4 MiB of another host's shows %q, want its posted line", got)
	}
}
