package folderconfig_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/taskhoster/taskhoster/adapters/folderconfig"
	"github.com/taskhoster/taskhoster/domain"
)

// errorsOf are the errors Check reports for file, as `check` prints them:
// what a kept queue's Problems must say.
func errorsOf(t *testing.T, dir, file string) []string {
	t.Helper()
	var out []string
	for _, p := range folderconfig.Check(dir) {
		if p.File == file && !p.Warning {
			out = append(out, p.String())
		}
	}
	return out
}

// TestReloadKeepsTheLastGoodQueueFile (SPEC §12): a served queue whose file
// turns invalid keeps its last valid version, with Problems, through any
// number of reloads and typos, logged once per change of its problems;
// check still fails on it; a valid file again is served as it is, Problems
// cleared; a removed file removes the queue.
func TestReloadKeepsTheLastGoodQueueFile(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, goodTree())
	core, logs := observer.New(zap.InfoLevel)
	live, err := folderconfig.New(dir, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, filepath.FromSlash(resizeFile))
	good := queue(live, host, "resize")
	if good == nil || len(good.Problems) != 0 {
		t.Fatalf("resize at start: %+v", good)
	}

	// A typo: an unknown setting.
	writeTree(t, dir, map[string]string{resizeFile: `{"item": {}, "settings": {"leaseSecond": 5}}`})
	logs.TakeAll()
	live.Reload()
	q := queue(live, host, "resize")
	want := errorsOf(t, dir, file)
	if q == nil || len(want) != 1 {
		t.Fatalf("resize after a typo: %+v (check: %q)", q, want)
	}
	if diff := cmp.Diff(want, q.Problems); diff != "" {
		t.Errorf("Problems (-want +got):\n%s", diff)
	}
	if !cmp.Equal(q.Settings, good.Settings) || !cmp.Equal(q.Access, good.Access) || string(q.ItemRaw) != string(good.ItemRaw) {
		t.Errorf("the kept queue is not the last valid version: %+v", q)
	}
	if len(good.Problems) != 0 {
		t.Errorf("the snapshot in force before was changed: %v", good.Problems)
	}
	if !slices.ContainsFunc(live.Queues(), func(x *domain.Queue) bool { return x == q }) {
		t.Errorf("Queues() does not list the kept queue")
	}
	warns := logs.FilterLevelExact(zapcore.WarnLevel).All()
	if len(warns) != 1 {
		t.Fatalf("%d warnings, want 1: %v", len(warns), logs.All())
	}
	f := warns[0].ContextMap()
	if f["file"] != file || f["jsonPath"] != "/settings/leaseSecond" || !strings.HasPrefix(fmt.Sprint(f["reason"]), "unknown setting") {
		t.Errorf("warning %q %v does not name the file, path and reason", warns[0].Message, f)
	}
	if n := logs.FilterLevelExact(zapcore.ErrorLevel).Len(); n != 0 {
		t.Errorf("the kept file is also logged as not served: %v", logs.All())
	}

	// check still reports the error, and says what a server does.
	problems := folderconfig.Check(dir)
	if !folderconfig.HasErrors(problems) {
		t.Errorf("check passes an invalid queue file")
	}
	if !slices.ContainsFunc(problems, func(p folderconfig.Problem) bool {
		return p.File == file && p.Warning && p.Reason != "" && p.String() != want[0]
	}) {
		t.Errorf("check does not say the last valid version stays in force: %v", problems)
	}

	// Another reload, the file unchanged: served alike, not logged again.
	live.Reload()
	if q := queue(live, host, "resize"); q == nil || !cmp.Equal(want, q.Problems) || !cmp.Equal(q.Settings, good.Settings) {
		t.Errorf("resize after a second reload: %+v", q)
	}
	if n := logs.FilterLevelExact(zapcore.WarnLevel).Len(); n != 1 {
		t.Errorf("the kept file was logged again: %v", logs.All())
	}

	// Another typo: still the first version, the new problems, logged.
	writeTree(t, dir, map[string]string{resizeFile: `{"item": {}, `})
	live.Reload()
	q = queue(live, host, "resize")
	if q == nil || !cmp.Equal(q.Settings, good.Settings) || !cmp.Equal(errorsOf(t, dir, file), q.Problems) || cmp.Equal(want, q.Problems) {
		t.Errorf("resize after a second typo: %+v", q)
	}
	if n := logs.FilterLevelExact(zapcore.WarnLevel).Len(); n != 2 {
		t.Errorf("%d warnings after new problems, want 2: %v", n, logs.All())
	}

	// Valid again, with other settings: served as it is now.
	writeTree(t, dir, map[string]string{resizeFile: `{"item": {}, "settings": {"leaseSeconds": 5}}`})
	live.Reload()
	q = queue(live, host, "resize")
	if q == nil || len(q.Problems) != 0 || q.Settings.LeaseSeconds != 5 {
		t.Errorf("resize valid again: %+v", q)
	}
	if logs.FilterMessage("hosts folder: queue file valid again").Len() != 1 {
		t.Errorf("the file valid again is not logged: %v", logs.All())
	}

	// Broken, then removed: gone (404), as a removed file always was.
	writeTree(t, dir, map[string]string{resizeFile: `{`})
	live.Reload()
	if q := queue(live, host, "resize"); q == nil || len(q.Problems) == 0 || q.Settings.LeaseSeconds != 5 {
		t.Fatalf("resize broken again: %+v", q)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	live.Reload()
	if q := queue(live, host, "resize"); q != nil {
		t.Errorf("a removed queue file is still served: %+v", q)
	}
	// Back invalid after its removal: nothing valid to keep.
	writeTree(t, dir, map[string]string{resizeFile: `{`})
	live.Reload()
	if q := queue(live, host, "resize"); q != nil {
		t.Errorf("a queue file invalid since it came back is served: %+v", q)
	}
}

// TestNeverValidQueueFileIsNotServed: a queue file invalid from the start,
// or from its first appearance, is not served, at any reload; once valid
// it is.
func TestNeverValidQueueFileIsNotServed(t *testing.T) {
	dir := t.TempDir()
	files := goodTree()
	files[resizeFile] = `{"item": {}, "access": {"work": ["ghost"]}}`
	writeTree(t, dir, files)
	live, err := folderconfig.New(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	writeTree(t, dir, map[string]string{queuesDir + "fresh.json": `{"item": {"type": 7}}`})
	for range 2 {
		live.Reload()
		for _, name := range []string{"resize", "fresh"} {
			if q := queue(live, host, name); q != nil {
				t.Errorf("%s, never valid, is served: %+v", name, q)
			}
		}
	}
	writeTree(t, dir, map[string]string{queuesDir + "fresh.json": minimalItem})
	live.Reload()
	if q := queue(live, host, "fresh"); q == nil || len(q.Problems) != 0 {
		t.Errorf("fresh, valid now: %+v", q)
	}
}

// TestLiveKeepsTheLastGoodQueueFile: the same through the watcher, and for
// a file made invalid by another one (the user its access names is gone).
func TestLiveKeepsTheLastGoodQueueFile(t *testing.T) {
	dir, live, reloaded := startLive(t, goodTree())
	if err := os.Remove(filepath.Join(dir, filepath.FromSlash(usersDir+"box.json"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, reloaded, "resize kept with a problem", func() bool {
		q := queue(live, host, "resize")
		return q != nil && len(q.Problems) > 0
	})
	q := queue(live, host, "resize")
	if q.Settings.LeaseSeconds != 30 || q.Access.Check("box", domain.ActionWork) != domain.Allowed {
		t.Errorf("resize is not its last valid version: %+v", q)
	}
	writeTree(t, dir, map[string]string{usersDir + "box.json": `{"name": "box", "token": "` + boxToken + `"}`})
	waitFor(t, reloaded, "resize valid again", func() bool {
		q := queue(live, host, "resize")
		return q != nil && len(q.Problems) == 0
	})
}
