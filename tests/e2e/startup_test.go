package e2e

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// An expected problem at start-up is one line on stderr that names it: no
// stack trace, no account of the dependency-injection chain. serve exits
// non-zero and leaves behind no folder it made.
func TestStartUpProblemsAreOneLine(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	running := start(t, newDirs(t)) // holds its items folder's lock

	cases := []struct {
		name  string
		dirs  func(d dirs) dirs
		extra []string
		cause string
	}{
		{"missing hosts folder", func(d dirs) dirs { d.hosts += "-missing"; return d }, nil, "hosts folder"},
		{"taken port", func(d dirs) dirs { return d }, []string{"--addr", taken.Addr().String()}, "address already in use"},
		{"locked items folder", func(d dirs) dirs { d.items = running.items; return d }, nil, "in use by another taskhoster process"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := c.dirs(newDirs(t))
			args := append([]string{"serve", "--hosts", d.hosts, "--items", d.items, "--logs", d.logs,
				"--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}, c.extra...)
			cmd := exec.Command(binary, args...)
			out, err := cmd.CombinedOutput()
			if _, ok := err.(*exec.ExitError); !ok {
				t.Fatalf("serve = %v, want a non-zero exit; output:\n%s", err, out)
			}
			var plain []string // lines that are not the JSON log
			for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				bads := []string{"goroutine ", "stacktrace", "errorVerbose", "could not build", "fx.", "dig."}
				if !strings.HasPrefix(line, "{") {
					plain = append(plain, line)
					bads = append(bads, ".go:")
				}
				for _, bad := range bads {
					if strings.Contains(line, bad) {
						t.Errorf("output has %q:\n%s", bad, line)
					}
				}
			}
			if len(plain) != 1 || !strings.HasPrefix(plain[0], "taskhoster serve: ") || !strings.Contains(plain[0], c.cause) {
				t.Errorf("want one line naming %q, got:\n%s", c.cause, strings.Join(plain, "\n"))
			}
			for _, dir := range []string{d.items, d.logs} {
				if dir == running.items {
					continue
				}
				if _, err := os.Stat(dir); err == nil {
					entries, _ := os.ReadDir(dir)
					t.Errorf("failed start left %s behind (%d entries)", filepath.Base(dir), len(entries))
				}
			}
		})
	}
	// The running server was not disturbed.
	if r := running.do("GET", "/_health", "", ""); r.Status != 200 {
		t.Errorf("the server holding the lock answers %d", r.Status)
	}
}

// TestHugeLogDaysRefused: a --log-days so large that the first day kept
// overflows the calendar (an operator's "keep it for ever") is refused at
// start-up, by flag or by environment, instead of wrapping round to a day
// after today and pruning the whole event log.
func TestHugeLogDaysRefused(t *testing.T) {
	t.Parallel()
	const huge = "9223372036854775807"
	for _, how := range []string{"flag", "env"} {
		t.Run(how, func(t *testing.T) {
			d := newDirs(t)
			old := filepath.Join(d.logs, "tasks", "2026-01-02.jsonl")
			writeFile(t, old, `{"event":"posted"}`+"\n")
			var env, extra []string
			if how == "flag" {
				extra = []string{"--log-days", huge}
			} else {
				env = []string{"TASKHOSTER_LOG_DAYS=" + huge}
			}
			s, err := launchEnv(t, d, env, extra...)
			if err == nil {
				// What the first prune then does to the log.
				eventually(t, "the first prune", func() bool { return !exists(old) })
				t.Fatalf("serve started with --log-days %s, and its first prune removed the whole event log", huge)
			}
			if !strings.Contains(s.Stderr(), "--log-days") {
				t.Errorf("the refusal does not name --log-days:\n%s", s.Stderr())
			}
			if !exists(old) {
				t.Errorf("the event log's day file was removed")
			}
		})
	}
}

// TestFailedStartRemovesTheParentsItMade: with the default folders
// (./var/taskhoster-items, ./var/taskhoster-logs) a start that fails,
// say in a folder without the hosts folder, made ./var as well as the
// two; it leaves none of them behind.
func TestFailedStartRemovesTheParentsItMade(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	cmd := exec.Command(binary, "serve", "--hosts", filepath.Join(root, "missing"),
		"--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	cmd.Dir = root // the default --items and --logs are under ./var
	out, err := cmd.CombinedOutput()
	if _, ok := err.(*exec.ExitError); !ok || !strings.Contains(string(out), "hosts folder") {
		t.Fatalf("serve = %v, want a non-zero exit naming the hosts folder; output:\n%s", err, out)
	}
	if entries, _ := os.ReadDir(root); len(entries) > 0 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("failed start left %v behind in its working folder", names)
	}
}
