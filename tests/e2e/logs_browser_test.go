package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"
)

// chromium is Debian's Chromium, which .ci/run installs.
const chromium = "/usr/bin/chromium"

// logsServe starts `taskhoster logs serve` on store on a free port and
// returns its base URL ("http://127.0.0.1:PORT"). It is stopped with the test.
func logsServe(t *testing.T, store string) string {
	t.Helper()
	cmd := logsCommand("logs", "serve", "--store", store, "--addr", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	addr := make(chan string, 1)
	go func() {
		// The first line says where it listens; the rest is drained so the
		// process never blocks on a full pipe.
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			addr <- regexp.MustCompile(`http://[0-9.:]+`).FindString(sc.Text())
		}
		for sc.Scan() {
		}
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-exited
	})
	select {
	case url := <-addr:
		if url == "" {
			t.Fatalf("logs serve did not say where it listens")
		}
		return url
	case <-exited:
		t.Fatalf("logs serve exited: %s", stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("logs serve did not listen within 30s")
	}
	return ""
}

// TestLogsBrowser drives the Task Logs page in headless Chromium: the
// list, a filter by task id typed into the form, the task's trail, its
// payload links (new tab, noopener), and a payload body.
func TestLogsBrowser(t *testing.T) {
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("SKIP: the browser test needs Chromium at %s (apt-get install chromium): %v", chromium, err)
	}
	d := newDirs(t)
	logsQueues(t, d)
	s := start(t, d, "--sync", "none")
	s.finishTask("archived", 0)
	id := s.finishTask("archived", 1)
	s.finishTask("resize", 2)
	store := t.TempDir()
	s.mustPull(store)
	base := logsServe(t, store)

	// The deadline covers the browser too: past it, Chromium is stopped.
	deadline, stop := context.WithTimeout(context.Background(), 2*time.Minute)
	defer stop()
	alloc, cancelAlloc := chromedp.NewExecAllocator(deadline,
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()),
	)
	defer cancelAlloc()
	ctx, cancelTab := chromedp.NewContext(alloc)
	defer cancelTab()

	// The list: newest first, every readable line of the three tasks.
	logsMust(t, "open the list", chromedp.Do(ctx,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.CSS("table#events")),
	))
	all := browse(t, ctx, "read the list", chromedp.Evaluate[[]string](
		`[...document.querySelectorAll("a.task")].map(a => a.textContent)`))
	if len(all) != 18 {
		t.Errorf("the list shows %d events, want 18 (3 tasks of 6)", len(all))
	}

	// Filter by the task id: type it into the form and submit.
	logsMust(t, "type the task id", chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("id"), id)))
	if _, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("apply"))); err != nil {
		t.Fatalf("submit the filter: %v", err)
	}
	logsMust(t, "wait for the filtered page", chromedp.Do(ctx,
		chromedp.WaitReady(chromedp.CSS(`input#id[value="`+id+`"]`))))
	filtered := browse(t, ctx, "read the filtered list", chromedp.Evaluate[[]string](
		`[...document.querySelectorAll("a.task")].map(a => a.textContent)`))
	if want := slices.Repeat([]string{id}, 6); !slices.Equal(filtered, want) {
		t.Errorf("filtered list shows %v, want task %s six times", filtered, id)
	}

	// Open the trail by clicking the task link.
	if _, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS("a.task"))); err != nil {
		t.Fatalf("open the trail: %v", err)
	}
	logsMust(t, "wait for the trail", chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS("table#trail"))))
	trail := browse(t, ctx, "read the trail", chromedp.Evaluate[[]string](
		`[...document.querySelectorAll("#trail tr.event td:nth-child(2)")].map(td => td.textContent)`))
	if diff := cmp.Diff([]string{"posted", "claimed", "progress", "progress", "result", "fetched"}, trail); diff != "" {
		t.Errorf("trail (-want +got):\n%s", diff)
	}

	// Every payload link opens a new tab without a handle on this page.
	links := browse(t, ctx, "read the payload links", chromedp.AttributesAll(chromedp.CSSAll("a.payload")))
	var resultHref string
	files := map[string]bool{}
	for _, a := range links {
		if a["target"] != "_blank" || a["rel"] != "noopener" {
			t.Errorf("payload link %v: want target=_blank and rel=noopener", a)
		}
		file := a["href"][strings.LastIndexByte(a["href"], '/')+1:]
		files[file] = true
		if file == "result.json" {
			resultHref = a["href"]
		}
	}
	for _, file := range []string{"item.json", "progress.jsonl", "result.json"} {
		if !files[file] {
			t.Errorf("no link to %s among %v", file, links)
		}
	}
	if resultHref == "" {
		t.FailNow()
	}

	// Following one shows the body, as JSON.
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(base+resultHref))
	if err != nil {
		t.Fatalf("open %s: %v", resultHref, err)
	}
	if resp.Status != 200 || resp.MimeType != "application/json" {
		t.Errorf("%s: status %d, type %q", resultHref, resp.Status, resp.MimeType)
	}
	text := browse(t, ctx, "read the body", chromedp.Evaluate[string](`document.body.innerText`))
	var got map[string]any
	if err := json.Unmarshal([]byte(text), &got); err != nil || got["url"] != "https://ex.com/1.jpg" {
		t.Errorf("result.json shows %q, want the result {\"url\":\"https://ex.com/1.jpg\"}", text)
	}

	// progress.jsonl opens in the tab as text (a download would abort the
	// navigation), one line per progress report.
	resp, err = chromedp.Run(ctx, chromedp.NavigateResponse(base+strings.Replace(resultHref, "result.json", "progress.jsonl", 1)))
	if err != nil {
		t.Fatalf("open progress.jsonl: %v", err)
	}
	if resp.Status != 200 || resp.MimeType != "text/plain" {
		t.Errorf("progress.jsonl: status %d, type %q", resp.Status, resp.MimeType)
	}
	text = browse(t, ctx, "read progress.jsonl", chromedp.Evaluate[string](`document.body.innerText`))
	if want := "{\"percent\":40}\n{\"percent\":90}"; strings.TrimSpace(text) != want {
		t.Errorf("progress.jsonl shows %q, want %q", text, want)
	}
}

// TestLogsBrowserFollowsAPull: while `logs pull --follow` runs, a task
// finished and a task failed on the server appear on the open list without
// a reload, the failure with a FAILED badge; the list counts what matches,
// offers the queues it knows, filters by a prefix; a task's page says how
// long it waited and ran.
func TestLogsBrowserFollowsAPull(t *testing.T) {
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("SKIP: the browser test needs Chromium at %s (apt-get install chromium): %v", chromium, err)
	}
	d := newDirs(t)
	logsQueues(t, d)
	s := start(t, d, "--sync", "none")
	first := s.finishTask("archived", 0)
	store := t.TempDir()
	s.mustPull(store)
	base := logsServe(t, store)
	follow := logsCommand(s.pullArgs(store, "--follow", "--every", "200ms")...)
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = follow.Process.Signal(syscall.SIGTERM); _ = follow.Wait() })

	deadline, stop := context.WithTimeout(context.Background(), 2*time.Minute)
	defer stop()
	alloc, cancelAlloc := chromedp.NewExecAllocator(deadline,
		chromedp.ExecPath(chromium), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()),
	)
	defer cancelAlloc()
	ctx, cancelTab := chromedp.NewContext(alloc)
	defer cancelTab()

	logsMust(t, "open the list", chromedp.Do(ctx,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.CSS("table#events")),
		// The stream is open once the page says it is live.
		chromedp.WaitVisible(chromedp.CSS(`#live`)),
	))
	browse(t, ctx, "the page goes live", chromedp.Poll[bool](
		`document.getElementById("live").textContent.startsWith("live")`))
	// A mark on the page that a reload would lose.
	browse(t, ctx, "mark the page", chromedp.Evaluate[bool](`window.notReloaded = true`))
	count := browse(t, ctx, "read the count", chromedp.Evaluate[string](`document.getElementById("count").textContent`))
	if !strings.HasPrefix(count, "6 events match.") {
		t.Errorf("count %q, want 6 events", count)
	}
	queues := browse(t, ctx, "read the queues offered", chromedp.Evaluate[[]string](
		`[...document.querySelectorAll("datalist#queues option")].map(o => o.value)`))
	if !slices.Contains(queues, "archived") || len(queues) != 1 {
		t.Errorf("queues offered %v, want [archived]", queues)
	}

	// The server moves on; the follow pulls it; the open page shows it.
	done := s.finishTask("resize", 1)
	failed := s.post("resize", aliceToken, `{"url":"https://ex.com/broken.png"}`)
	if r := s.do("POST", "/resize/claim", boxToken, `{"worker":"box-1"}`); r.Status != 200 || r.JSON(t)["id"] != failed {
		t.Fatalf("claim: %d %s", r.Status, r.Body)
	}
	if r := s.do("POST", "/resize/"+failed+"/fail", boxToken, `{"worker":"box-1","reason":{"why":"<broken>"}}`); r.Status != 200 {
		t.Fatalf("fail: %d %s", r.Status, r.Body)
	}
	logsMust(t, "the new lines appear without a reload", chromedp.Do(ctx,
		chromedp.WaitVisible(chromedp.CSS(`#events a.task[href$="/`+done+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#events tr.failure a.task[href$="/`+failed+`"]`)),
	))
	badge := browse(t, ctx, "read the failure's row", chromedp.Evaluate[string](
		`document.querySelector("#events tr.failure td.failure").textContent`))
	if !strings.Contains(badge, "FAILED") || !strings.Contains(badge, "✗ failed") {
		t.Errorf("the failure reads %q, want a FAILED badge and ✗ failed", badge)
	}
	color := browse(t, ctx, "read the badge colour", chromedp.Evaluate[string](
		`getComputedStyle(document.querySelector("#events tr.failure .badge")).backgroundColor`))
	if color != "rgb(198, 40, 40)" {
		t.Errorf("the badge is %s, want red", color)
	}
	browse(t, ctx, "count the matches again", chromedp.Poll[bool](
		`document.getElementById("count").textContent.startsWith("15 events match.")`))
	// No reload happened: the list was swapped in place.
	if !browse(t, ctx, "read the mark", chromedp.Evaluate[bool](`window.notReloaded === true`)) {
		t.Errorf("the page was reloaded")
	}

	// A prefix typed into the form: "res*" is the resize queue's 9 lines.
	logsMust(t, "type a prefix", chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("queue"), "res*")))
	if _, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.ID("apply"))); err != nil {
		t.Fatalf("submit the filter: %v", err)
	}
	shown := browse(t, ctx, "read the filtered list", chromedp.Evaluate[[]string](
		`[...document.querySelectorAll("#events tbody tr td:nth-child(3)")].map(td => td.textContent)`))
	if len(shown) != 9 || slices.ContainsFunc(shown, func(q string) bool { return q != "resize" }) {
		t.Errorf("queue res* shows %v, want resize's 9 lines", shown)
	}

	// The finished task's page: how long it waited and ran.
	if _, err := chromedp.RunResponse(ctx, chromedp.Navigate(base+"/tasks/"+host+"/archived/"+first)); err != nil {
		t.Fatalf("open the task: %v", err)
	}
	timing := browse(t, ctx, "read the timing", chromedp.Evaluate[[]string](
		`[...document.querySelectorAll("#timing dd")].map(dd => dd.textContent)`))
	if len(timing) != 3 || !strings.Contains(timing[0], "posted → first claim") || !strings.Contains(timing[1], "claim → end") {
		t.Errorf("timing %q", timing)
	}
}

func logsMust(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// browse runs an action that reads something from the page.
func browse[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}
