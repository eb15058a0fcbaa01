package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// tmpfs mounts a small tmpfs at a fresh folder and unmounts it at the end.
// It skips the test where mounting is not allowed (not root).
func tmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v: %s); disc-fault tests need root", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// TestFullDisc fills a small disc: posts then fail with 503 and a code, a
// log line says why, every acknowledged task is intact, and posting works
// again once space returns.
func TestFullDisc(t *testing.T) {
	t.Parallel()
	mnt := tmpfs(t, "1m")
	d := newDirs(t)
	d.items, d.logs = filepath.Join(mnt, "items"), filepath.Join(mnt, "logs")
	filler := filepath.Join(mnt, "filler")
	if err := os.WriteFile(filler, make([]byte, 900<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	s := start(t, d, "--sync", "always")

	var acked []string
	var refused response
	for i := 0; i < 500; i++ {
		r := s.do("POST", "/resize", aliceToken, fmt.Sprintf(`{"url":"%s"}`, strings.Repeat("x", 600)))
		if r.Status == http.StatusCreated {
			acked = append(acked, r.JSON(t)["id"].(string))
			continue
		}
		refused = r
		break
	}
	if refused.Status != http.StatusServiceUnavailable {
		t.Fatalf("disc never filled, or answered %d %s", refused.Status, refused.Body)
	}
	code := refused.JSON(t)["error"]
	if code != "storage_unavailable" && code != "log_unavailable" {
		t.Errorf("full-disc error code = %v", code)
	}
	// The log line travels through a pipe; it may land just after the answer.
	eventually(t, "a log line saying the disc is full", func() bool {
		return strings.Contains(s.Stderr(), "no space left on device")
	})
	checkIntact(t, s, acked)

	// Space returns: posting works again, and everything is still there.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	acked = append(acked, s.post("resize", aliceToken, `{"url":"after"}`))
	checkIntact(t, s, acked)
}

// TestReadOnlyQueueFolder: with a queue's folder read-only (a read-only
// bind mount over it), writes answer 503 and change nothing; once writable
// again they work.
func TestReadOnlyQueueFolder(t *testing.T) {
	t.Parallel()
	mnt := tmpfs(t, "4m")
	d := newDirs(t)
	d.items, d.logs = filepath.Join(mnt, "items"), filepath.Join(mnt, "logs")
	s := start(t, d, "--sync", "always")
	acked := []string{s.post("resize", aliceToken, `{"url":"before"}`)}

	queueDir := filepath.Join(d.items, host, "resize")
	mount(t, "--bind", queueDir, queueDir)
	mount(t, "-o", "remount,bind,ro", queueDir)
	r := s.do("POST", "/resize", aliceToken, `{"url":"while read-only"}`)
	if r.Status != http.StatusServiceUnavailable || r.JSON(t)["error"] != "storage_unavailable" {
		t.Fatalf("post into a read-only folder: %d %s", r.Status, r.Body)
	}
	claim := s.do("POST", "/resize/claim", boxToken, `{}`)
	if claim.Status != http.StatusServiceUnavailable {
		t.Fatalf("claim in a read-only folder: %d %s", claim.Status, claim.Body)
	}
	eventually(t, "a log line saying the folder is read-only", func() bool {
		return strings.Contains(s.Stderr(), "read-only file system")
	})
	if out, err := exec.Command("umount", queueDir).CombinedOutput(); err != nil {
		t.Fatalf("umount: %v: %s", err, out)
	}
	checkIntact(t, s, acked)
	acked = append(acked, s.post("resize", aliceToken, `{"url":"after"}`))
	if got := s.do("POST", "/resize/claim", boxToken, `{}`).JSON(t)["id"]; got != acked[0] {
		t.Errorf("claim after the folder came back got %v, want %s", got, acked[0])
	}
}

func mount(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
		t.Fatalf("mount %v: %v: %s", args, err, out)
	}
}

// checkIntact: every acknowledged task answers and its file parses.
func checkIntact(t *testing.T, s *server, ids []string) {
	t.Helper()
	for _, id := range ids {
		if r := s.do("GET", "/resize/"+id, aliceToken, ""); r.Status != http.StatusOK {
			t.Errorf("acknowledged task %s: %d %s", id, r.Status, r.Body)
		}
	}
	files, _ := filepath.Glob(filepath.Join(s.items, host, "resize", "*", "*.json"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil || !json.Valid(data) {
			t.Errorf("task file %s is damaged: %v %q", f, err, data)
		}
	}
	if len(files) < len(ids) {
		t.Errorf("%d task files for %d acknowledged tasks", len(files), len(ids))
	}
}
