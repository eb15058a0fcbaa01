package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"
)

// readerToken is a user with only status access on the dashboard's queue.
const readerToken = "4ead0000000000000000000000000ead"

// dashboardQueues adds to the fixture the queue "jobs": alice posts,
// watches, reads the logs and manages it, box works it, reader may only
// see its status; one attempt each, payloads archived.
func dashboardQueues(t *testing.T, d dirs) {
	writeFile(t, filepath.Join(d.hosts, host, "taskhoster-users", "reader.json"), `{"name":"reader","token":"`+readerToken+`"}`)
	writeFile(t, filepath.Join(d.hosts, host, "taskhoster-queues", "jobs.json"), `{
		"item": {"type":"object","required":["url"]},
		"settings": {"maxAttempts": 1, "taskhoster-archivePayloads": true},
		"access": {"post":["alice"], "status":["alice","reader"], "work":["box"], "logs":["alice"], "manage":["alice"]}
	}`)
}

// browser starts headless Chromium for the test; tabs come from tab.
type browser struct {
	t       *testing.T
	alloc   context.Context
	first   context.Context // the first tab, whose browser the others share
	screens string          // where screenshots go ("" for nowhere): $TASKHOSTER_SCREENS
}

func newBrowser(t *testing.T, deadline context.Context) *browser {
	t.Helper()
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("SKIP: the browser test needs Chromium at %s (apt-get install chromium): %v", chromium, err)
	}
	alloc, cancel := chromedp.NewExecAllocator(deadline,
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		// Pages open payloads in new tabs by a click: let them.
		chromedp.Flag("disable-popup-blocking", true),
		chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()),
	)
	t.Cleanup(cancel)
	b := &browser{t: t, alloc: alloc, screens: os.Getenv("TASKHOSTER_SCREENS")}
	if b.screens != "" {
		if err := os.MkdirAll(b.screens, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshots go to %s", b.screens)
	}
	return b
}

// tab opens a new tab: its own sessionStorage, so its own sign-in. The
// first starts the browser; the others open in it.
func (b *browser) tab() context.Context {
	parent := b.alloc
	if b.first != nil {
		parent = b.first
	}
	ctx, cancel := chromedp.NewContext(parent)
	b.t.Cleanup(cancel)
	if b.first == nil {
		b.first = ctx
	}
	return ctx
}

// shot saves a full-page screenshot as name.png when screenshots are asked for.
func (b *browser) shot(ctx context.Context, name string) {
	b.t.Helper()
	if b.screens == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	logsMust(b.t, "screenshot "+name, err)
	if err := os.WriteFile(filepath.Join(b.screens, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// signIn opens the dashboard at url and enters token in its form.
func signIn(t *testing.T, ctx context.Context, url, token string) {
	t.Helper()
	logsMust(t, "open the dashboard", chromedp.Do(ctx,
		chromedp.Navigate(url),
		chromedp.WaitVisible(chromedp.CSS(`#token`))))
	logsMust(t, "enter the token", chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`#token`), token),
		chromedp.Click(chromedp.CSS(`#signin-button`))))
	waitFor(t, ctx, "the sign-in", `!document.getElementById("whoami").hidden`)
	waitFor(t, ctx, "the live socket", `!!document.querySelector(".live.on")`)
}

// waitFor waits until the page's expression holds (chromedp polls it in
// the page on every animation frame); the test's deadline bounds it.
func waitFor(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr)); err != nil {
		t.Fatalf("waiting for %s (%s): %v", what, expr, err)
	}
}

// TestDashboardBrowser drives /_dash in headless Chromium as three users.
// alice (manage): a task posted by a client appears without a reload; a
// pause from the page makes a claim wait, and a resume hands it the task;
// the task failed by its worker shows among the failures and a retry from
// the page makes it pending again; its page shows the event trail and
// opens a payload in a new tab. reader (status only) sees the figures and
// no item and no button; eve (no access on the queue) sees nothing of it.
func TestDashboardBrowser(t *testing.T) {
	deadline, stop := context.WithTimeout(context.Background(), 3*time.Minute)
	defer stop()
	b := newBrowser(t, deadline)
	d := newDirs(t)
	dashboardQueues(t, d)
	s := start(t, d, "--sync", "none")
	// NAME.localhost reaches the host NAME, and Chromium resolves every
	// *.localhost name to loopback on its own.
	base := "http://" + host + ".localhost:" + s.url[strings.LastIndexByte(s.url, ':')+1:] + "/_dash/"

	alice := b.tab()
	signIn(t, alice, base, aliceToken)
	waitFor(t, alice, "the jobs card", `!!document.querySelector('.queue[data-queue="jobs"]')`)

	// A post by a client shows up in the open list, the page not reloaded.
	logsMust(t, "open the queue", chromedp.Do(alice,
		chromedp.Evaluate[chromedp.Void](`window.notReloaded = true; location.hash = "#/q/jobs"`),
		chromedp.WaitVisible(chromedp.CSS(`#no-tasks`))))
	id, err := s.clientAs(aliceToken).Post(deadline, "jobs", map[string]string{"url": "https://ex.com/a.jpg"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, alice, "the posted task in the list", `!!document.querySelector('#task-list tr[data-id="`+id+`"]')`)
	waitFor(t, alice, "one claimable", `document.getElementById("count-claimable").textContent === "1"`)
	if !browse(t, alice, "the page was not reloaded", chromedp.Evaluate[bool](`window.notReloaded === true`)) {
		t.Errorf("the page reloaded to show the task")
	}
	b.shot(alice, "2-queue-manage")

	// Pause from the page: a claim then waits, which the page shows.
	logsMust(t, "pause", chromedp.Do(alice, chromedp.Click(chromedp.CSS(`button[data-action="pause"]`))))
	waitFor(t, alice, "the paused badge", `!!document.getElementById("paused")`)
	if info := s.do("GET", "/jobs", aliceToken, "").JSON(t); info["paused"] != true {
		t.Fatalf("GET /jobs after the page's pause: %v", info)
	}
	claimed := make(chan response, 1)
	go func() {
		claimed <- s.doHost("POST", "/jobs/claim", host, boxToken, `{"worker":"box-1","wait":30}`)
	}()
	waitFor(t, alice, "one claim waiting", `document.getElementById("waiting").textContent === "1"`)
	select {
	case r := <-claimed:
		t.Fatalf("a claim on the paused queue answered: %d %s", r.Status, r.Body)
	default:
	}
	b.shot(alice, "3-queue-paused")
	logsMust(t, "resume", chromedp.Do(alice, chromedp.Click(chromedp.CSS(`button[data-action="resume"]`))))
	select {
	case r := <-claimed:
		if r.Status != http.StatusOK || r.JSON(t)["id"] != id {
			t.Fatalf("claim after the resume: %d %s, want task %s", r.Status, r.Body, id)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the claim did not get the task after the resume")
	}
	waitFor(t, alice, "the lease", `!!document.querySelector('#leases tr[data-id="`+id+`"]')`)
	lease := browse(t, alice, "read the lease", chromedp.Evaluate[[]string](
		`[...document.querySelectorAll('#leases tr[data-id="`+id+`"] td')].map(td => td.textContent)`))
	if len(lease) != 4 || lease[1] != "box-1" || lease[2] != "1" {
		t.Errorf("the lease row shows %q, want the task, box-1, attempt 1 and the time left", lease)
	}

	// The worker fails it: a dead letter, in its group; retried from the page.
	if r := s.doHost("POST", "/jobs/"+id+"/fail", host, boxToken, `{"worker":"box-1","reason":{"why":"bad url"}}`); r.Status != http.StatusOK {
		t.Fatalf("fail: %d %s", r.Status, r.Body)
	}
	retry := `#failures .group[data-error="failed"] tr[data-id="` + id + `"] button[data-action="retry"]`
	waitFor(t, alice, "the failure", `!!document.querySelector('`+retry+`')`)
	logsMust(t, "zoom the chart", chromedp.Do(alice, chromedp.Click(chromedp.CSS(`button[data-range="300"]`))))
	waitFor(t, alice, "the chart's axis at 5 min", `document.querySelector(".axis span").textContent === "−5 min"`)
	b.shot(alice, "4-queue-failed")
	logsMust(t, "retry", chromedp.Do(alice, chromedp.Click(chromedp.CSS(retry))))
	waitFor(t, alice, "the task pending again", `!!document.querySelector('#task-list tr[data-id="`+id+`"][data-status="pending"]')`)
	if rec := s.record("jobs", "pending", id); rec["status"] != "pending" || rec["attempts"] != 0.0 || rec["error"] != nil {
		t.Errorf("the task file after the page's retry: %v", rec)
	}
	if got := s.eventsOf(id); !cmp.Equal(got, []string{"posted", "claimed", "failed", "retried"}) {
		t.Errorf("the task's events: %v", got)
	}

	// The task's page: its record, its trail, and a payload in a new tab.
	logsMust(t, "open the task", chromedp.Do(alice,
		chromedp.Click(chromedp.CSS(`#task-list a.task`)),
		chromedp.WaitVisible(chromedp.CSS(`#trail-table`))))
	waitFor(t, alice, "the whole trail", `document.querySelectorAll("#trail-table tr.event").length === 4`)
	trail := browse(t, alice, "read the trail", chromedp.Evaluate[[]string](
		`[...document.querySelectorAll("#trail-table tr.event")].map(tr => tr.dataset.event)`))
	if diff := cmp.Diff([]string{"posted", "claimed", "failed", "retried"}, trail); diff != "" {
		t.Errorf("trail (-want +got):\n%s", diff)
	}
	b.shot(alice, "5-task")
	opened := chromedp.WaitNewTarget(alice, func(i *target.Info) bool { return strings.HasPrefix(i.URL, "blob:") })
	logsMust(t, "open item.json", chromedp.Do(alice, chromedp.Click(chromedp.CSS(`button[data-file="item.json"]`))))
	select {
	case tid := <-opened:
		tab, cancel := chromedp.NewContext(alice, chromedp.WithTargetID(tid))
		defer cancel()
		text := browse(t, tab, "read the payload tab", chromedp.Evaluate[string](`document.body.innerText`))
		var item map[string]any
		if err := json.Unmarshal([]byte(text), &item); err != nil || item["url"] != "https://ex.com/a.jpg" {
			t.Errorf("the payload tab shows %q, want the item", text)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("item.json opened no tab")
	}

	// reader: the figures and the chart, no item, no button.
	reader := b.tab()
	signIn(t, reader, base, readerToken)
	waitFor(t, reader, "the jobs card", `!!document.querySelector('.queue[data-queue="jobs"] .badge.readonly')`)
	b.shot(reader, "6-overview-readonly")
	logsMust(t, "open the queue as reader", chromedp.Do(reader,
		chromedp.Evaluate[chromedp.Void](`location.hash = "#/q/jobs"`),
		chromedp.WaitVisible(chromedp.CSS(`#readonly`))))
	waitFor(t, reader, "one claimable", `document.getElementById("count-claimable").textContent === "1"`)
	seen := browse(t, reader, "read the page", chromedp.Evaluate[map[string]any](`({
		buttons: document.querySelectorAll("button.action").length,
		rows: document.querySelectorAll("#tasks, #leases, #failures, #task-list").length,
		chart: document.querySelectorAll("svg.chart polyline").length,
		text: document.body.innerText })`))
	if seen["buttons"] != 0.0 || seen["rows"] != 0.0 || seen["chart"] != 3.0 || strings.Contains(seen["text"].(string), id) {
		t.Errorf("reader's queue page: %v buttons, %v lists, %v chart lines, the task id shown %v; want 0, 0, 3, false",
			seen["buttons"], seen["rows"], seen["chart"], strings.Contains(seen["text"].(string), id))
	}
	b.shot(reader, "7-queue-readonly")

	// eve has no access on jobs: not a word of it, on the list or by name.
	eve := b.tab()
	signIn(t, eve, base, eveToken)
	waitFor(t, eve, "the public card", `!!document.querySelector('.queue[data-queue="public"]')`)
	if text := browse(t, eve, "read eve's list", chromedp.Evaluate[string](`document.getElementById("queues").innerText`)); strings.Contains(text, "jobs") {
		t.Errorf("eve's list names the queue jobs: %q", text)
	}
	logsMust(t, "open jobs as eve", chromedp.Do(eve,
		chromedp.Evaluate[chromedp.Void](`location.hash = "#/q/jobs"`),
		chromedp.WaitVisible(chromedp.CSS(`#missing`))))
	b.shot(eve, "8-no-access")
	// A hand-made link with a broken escape names no queue; the page still
	// starts (it used to throw before it did).
	logsMust(t, "load a link with a broken escape", chromedp.Do(eve,
		chromedp.Evaluate[chromedp.Void](`location.hash = "#/q/%E0"`),
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(`#missing`))))
	logsMust(t, "back to the overview", chromedp.Do(alice,
		chromedp.Evaluate[chromedp.Void](`location.hash = "#/"`),
		chromedp.WaitVisible(chromedp.CSS(`#queues`))))
	b.shot(alice, "1-overview")

	// The tokens went in headers and socket messages only.
	for _, tok := range []string{aliceToken, readerToken, eveToken} {
		if strings.Contains(s.Stderr(), tok) {
			t.Errorf("the server's log holds a token")
		}
	}
}
