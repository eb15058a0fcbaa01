package logsweb_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/domain/tasklog"
)

// chromium is Debian's Chromium, as in tests/e2e.
const chromium = "/usr/bin/chromium"

// The list keeps saying that it is live after live.js swapped in new
// events: the word sits inside the swapped count, and a fresh copy of the
// page has it empty.
func TestLiveStateOutlivesASwap(t *testing.T) {
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("SKIP: the browser test needs Chromium at %s (apt-get install chromium): %v", chromium, err)
	}
	ctx := context.Background()
	w, _, srv := oneLineMirror(t)

	deadline, stop := context.WithTimeout(ctx, 2*time.Minute)
	defer stop()
	alloc, cancel := chromedp.NewExecAllocator(deadline,
		chromedp.ExecPath(chromium), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()),
	)
	defer cancel()
	tab, cancelTab := chromedp.NewContext(alloc)
	defer cancelTab()
	waitFor := func(what, expr string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(tab, 15*time.Second)
		defer cancel()
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr)); err != nil {
			said, _ := chromedp.Run(tab, chromedp.Evaluate[string](`document.getElementById("live").textContent`))
			t.Fatalf("waiting for %s (%s): %v; #live says %q", what, expr, err, said)
		}
	}
	if err := chromedp.Do(tab, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatal(err)
	}
	live := `document.getElementById("live").textContent.startsWith("live")`
	waitFor("the page to go live", live)

	if _, err := w.Commit(ctx, host, "2026-07-26", tasklog.Cursor{Offset: 20}, []tasklog.Line{mk(10, idB, domain.EventPosted, "", tasklog.Sizes{})}); err != nil {
		t.Fatal(err)
	}
	waitFor("the new event swapped in", `!!document.querySelector('#events a.task[href$="/`+idB+`"]')`)
	waitFor("the page to still say it is live", live)
}
