package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReadmeWalkThrough runs the README's shell blocks, in their order, in
// one bash session (set -euo pipefail: every command must succeed) against
// the real binary serving a copy of examples/hosts, as a newcomer would
// type them. The block with `make run` is the server, which the test
// starts itself with that target's flags; a block whose first line is a
// comment ending in "until Ctrl-C" is another terminal and runs in the
// background until the end. The API's address 127.0.0.1:8080 becomes the
// test server's, logs serve's 127.0.0.1:7070 a port the kernel picks.
func TestReadmeWalkThrough(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"bash", "curl", "sed"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the README's blocks need %s: %v", tool, err)
		}
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := os.CopyFS(filepath.Join(root, "examples", "hosts"), os.DirFS("../../examples/hosts")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "bin", ".keep"), "")
	if err := os.Symlink(binary, filepath.Join(root, "bin", "taskhoster")); err != nil {
		t.Fatal(err)
	}
	s := start(t, dirs{
		hosts: filepath.Join(root, "examples", "hosts"),
		items: filepath.Join(root, "var", "taskhoster-items"),
		logs:  filepath.Join(root, "var", "taskhoster-logs"),
	})

	script, background := readmeScript(t, string(readme), s.url)
	if background != 2 {
		t.Errorf("%d blocks run until Ctrl-C, want 2 (work, logs serve)", background)
	}
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = root
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TASKHOSTER_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Its own process group, so the background blocks end with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	err = cmd.Run()
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	bg := func(n int) string {
		out, _ := os.ReadFile(filepath.Join(root, fmt.Sprintf("background-%d.log", n)))
		return string(out)
	}
	if err != nil {
		t.Fatalf("the walk-through failed: %v\nstdout:\n%s\nstderr:\n%s\nworker:\n%s\nserver:\n%s",
			err, stdout.String(), stderr.String(), bg(1), s.Stderr())
	}

	// The watches saw their tasks finished by the worker of the third
	// terminal, which said it runs until interrupted.
	if n := strings.Count(stdout.String(), `"status":"finished"`); n < 2 {
		t.Errorf("%d finished views on stdout, want the end of both watches:\n%s", n, stdout.String())
	}
	if w := bg(1); !strings.Contains(w, "until interrupted") || !strings.Contains(w, " finished in ") {
		t.Errorf("the worker's stderr:\n%s", w)
	}
	// logs serve, started last, serves the mirror logs pull filled.
	var page string
	eventually(t, "logs serve to serve its page", func() bool {
		m := regexp.MustCompile(`on (http://127\.0\.0\.1:\d+/)`).FindStringSubmatch(bg(2))
		if m == nil {
			return false
		}
		resp, err := http.Get(m[1])
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		page = string(body)
		return resp.StatusCode == 200
	})
	if !strings.Contains(page, "resize") {
		t.Errorf("the Task Logs page does not show the resize queue:\n%.2000s", page)
	}
}

// readmeScript turns the README's sh blocks (only those: the indented ones,
// such as make install, are not run) into one bash script run from
// the folder that holds bin/ and examples/, and counts the blocks it runs
// in the background (each logs to background-N.log).
func readmeScript(t *testing.T, readme, api string) (string, int) {
	t.Helper()
	blocks := regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(readme, -1)
	var b strings.Builder
	b.WriteString("set -euo pipefail\n")
	background := 0
	for _, m := range blocks {
		block := m[1]
		if strings.Contains(block, "make run") {
			continue // the server, started by the test
		}
		block = strings.ReplaceAll(block, "http://127.0.0.1:8080", api)
		block = strings.ReplaceAll(block, "127.0.0.1:7070", "127.0.0.1:0")
		first, _, _ := strings.Cut(block, "\n")
		if strings.HasPrefix(first, "#") && strings.HasSuffix(first, "until Ctrl-C") {
			background++
			fmt.Fprintf(&b, "(\n%s) </dev/null >background-%d.log 2>&1 &\n", block, background)
			continue
		}
		b.WriteString(block)
	}
	if len(blocks) < 5 {
		t.Fatalf("found %d sh blocks in the README", len(blocks))
	}
	return b.String(), background
}
