package folderconfig_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/taskhoster/taskhoster/adapters/folderconfig"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

var _ ports.Config = (*folderconfig.Live)(nil)

// startLive serves a hosts folder written from files and returns it with a
// channel that receives a signal after each reload.
func startLive(t *testing.T, files map[string]string) (string, *folderconfig.Live, <-chan struct{}) {
	t.Helper()
	dir := t.TempDir()
	writeTree(t, dir, files)
	live, err := folderconfig.New(dir, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	reloaded := make(chan struct{}, 1)
	live.OnReload(func(*folderconfig.Snapshot) {
		select {
		case reloaded <- struct{}{}:
		default: // a signal is already waiting; the test rechecks anyway
		}
	})
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := live.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return dir, live, reloaded
}

// waitFor waits until cond holds, checking after every reload, for at most
// two seconds (SPEC: changes take effect within about a second).
func waitFor(t *testing.T, reloaded <-chan struct{}, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(2 * time.Second)
	for !cond() {
		select {
		case <-reloaded:
		case <-deadline:
			t.Fatalf("not seen within 2s: %s", what)
		}
	}
}

func queue(l *folderconfig.Live, hostName, name string) *domain.Queue {
	h, ok := l.Host(hostName)
	if !ok {
		return nil
	}
	return h.Queues[name]
}

func TestLiveReload(t *testing.T) {
	dir, live, reloaded := startLive(t, goodTree())
	if queue(live, host, "resize") == nil {
		t.Fatal("resize is not served at start")
	}

	t.Run("add a queue file", func(t *testing.T) {
		writeTree(t, dir, map[string]string{queuesDir + "fresh.json": minimalItem})
		waitFor(t, reloaded, "queue fresh", func() bool { return queue(live, host, "fresh") != nil })
	})

	t.Run("change a schema", func(t *testing.T) {
		doc := json.RawMessage(`{"url": "x", "size": 5}`)
		if v := queue(live, host, "resize").Item.Validate(doc); v != nil {
			t.Fatalf("before the change: %v", v)
		}
		writeTree(t, dir, map[string]string{resizeFile: `{"item": {"type": "object", "properties": {"size": {"maximum": 4}}}}`})
		waitFor(t, reloaded, "the new resize schema", func() bool {
			q := queue(live, host, "resize")
			return q != nil && len(q.Item.Validate(doc)) == 1
		})
	})

	t.Run("remove a queue file", func(t *testing.T) {
		if err := os.Remove(filepath.Join(dir, filepath.FromSlash(queuesDir+"thumbnail.json"))); err != nil {
			t.Fatal(err)
		}
		waitFor(t, reloaded, "thumbnail gone", func() bool { return queue(live, host, "thumbnail") == nil })
	})

	t.Run("add a host folder", func(t *testing.T) {
		// Created in steps, as a person would: the folder first, then its
		// subfolders and files, each needing a new watch.
		writeTree(t, dir, map[string]string{"new.example.net": "<dir>"})
		writeTree(t, dir, map[string]string{
			"new.example.net/taskhoster-users/ann.json":   `{"name": "ann", "token": "` + otherToken + `"}`,
			"new.example.net/taskhoster-queues/jobs.json": `{"item": {}, "access": {"work": ["ann"]}}`,
		})
		waitFor(t, reloaded, "host new.example.net with queue jobs", func() bool { return queue(live, "new.example.net", "jobs") != nil })
		h, _ := live.Host("new.example.net")
		if user, ok := h.Authenticate(otherToken); !ok || user != "ann" {
			t.Errorf("Authenticate on the new host = %q, %v", user, ok)
		}
	})

	t.Run("add a queue to the new host", func(t *testing.T) {
		// Proves the subfolder of a host added at run time is watched.
		writeTree(t, dir, map[string]string{"new.example.net/taskhoster-queues/more.json": minimalItem})
		waitFor(t, reloaded, "queue more on the new host", func() bool { return queue(live, "new.example.net", "more") != nil })
	})

	t.Run("break a user file", func(t *testing.T) {
		writeTree(t, dir, map[string]string{usersDir + "alice.json": `{"name": "alice"}`})
		waitFor(t, reloaded, "alice locked out", func() bool {
			h, _ := live.Host(host)
			_, ok := h.Authenticate(aliceToken)
			return !ok
		})
		if queue(live, host, "resize") == nil {
			t.Errorf("resize stopped being served")
		}
	})

	t.Run("remove a host folder", func(t *testing.T) {
		if err := os.RemoveAll(filepath.Join(dir, "other.example.org")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, reloaded, "other.example.org gone", func() bool {
			_, ok := live.Host("other.example.org")
			return !ok
		})
		for _, q := range live.Queues() {
			if q.Host == "other.example.org" {
				t.Errorf("Queues() still lists %s/%s", q.Host, q.Name)
			}
		}
	})
}

func TestLiveLogsProblemsWithoutTokens(t *testing.T) {
	dir := t.TempDir()
	files := goodTree()
	files[usersDir+"box.json"] = `{"name": "box", "token": "` + aliceToken + `"}`
	files[resizeFile] = `{"item": {}, "settings": {"leaseSecs": 1}}`
	writeTree(t, dir, files)

	core, logs := observer.New(zap.DebugLevel)
	if _, err := folderconfig.New(dir, zap.New(core)); err != nil {
		t.Fatal(err)
	}
	var sawLeaseSecs bool
	for _, e := range logs.All() {
		fields := e.ContextMap()
		for _, v := range fields {
			if s, ok := v.(string); ok && (strings.Contains(s, aliceToken) || strings.Contains(s, boxToken)) {
				t.Errorf("log line %q %v reveals a token", e.Message, fields)
			}
		}
		if fields["jsonPath"] == "/settings/leaseSecs" && fields["file"] == filepath.Join(dir, filepath.FromSlash(resizeFile)) {
			sawLeaseSecs = true
		}
	}
	if !sawLeaseSecs {
		t.Errorf("the unknown setting was not logged with its file and path; logs: %v", logs.All())
	}
}

func TestNewNeedsAFolder(t *testing.T) {
	if _, err := folderconfig.New(filepath.Join(t.TempDir(), "missing"), nil); err == nil {
		t.Errorf("New(missing folder) succeeded")
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := folderconfig.New(file, nil); err == nil {
		t.Errorf("New(a file) succeeded")
	}
}

func TestStopWithoutStart(t *testing.T) {
	live, err := folderconfig.New(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := live.Stop(); err != nil {
		t.Errorf("Stop = %v", err)
	}
}
