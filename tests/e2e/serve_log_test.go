package e2e

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeLogsRequestLinesAtDebugOnly: by default the server logs no
// line per request; at --log-level debug it logs one for each, as JSON on
// a pipe, with the path but not the query string.
func TestServeLogsRequestLinesAtDebugOnly(t *testing.T) {
	t.Parallel()
	for _, level := range []string{"", "debug"} {
		var extra []string
		if level != "" {
			extra = []string{"--log-level", level}
		}
		s := start(t, newDirs(t), extra...)
		if r := s.do("GET", "/public?secret=1", "", ""); r.Status != 200 {
			t.Fatalf("GET /public: %d %s", r.Status, r.Body)
		}
		s.stop()
		var requests []map[string]any
		shutdown := false
		for line := range strings.SplitSeq(s.Stderr(), "\n") {
			var entry map[string]any
			if line == "" {
				continue
			}
			if err := json.Unmarshal([]byte(line), &entry); err != nil {
				t.Fatalf("log line is not JSON: %q", line)
			}
			switch entry["msg"] {
			case "request":
				requests = append(requests, entry)
			case "shutting down":
				shutdown = true // every line before it has been read
			}
		}
		if !shutdown {
			t.Fatalf("level %q: the log was not read to its end:\n%s", level, s.Stderr())
		}
		switch {
		case level == "" && len(requests) != 0:
			t.Errorf("default level: request lines %v, want none", requests)
		case level == "debug" && (len(requests) != 1 || requests[0]["path"] != "/public" || requests[0]["level"] != "debug" || requests[0]["status"] != 200.0):
			t.Errorf("debug: request lines %v, want one for /public, status 200", requests)
		}
	}
}

// TestServeConsoleLog: TASKHOSTER_LOG_FORMAT=console (or --log-format
// console; the default on a terminal) logs lines for a person: an ISO-8601
// time, the level as a word, the message, then the fields.
func TestServeConsoleLog(t *testing.T) {
	t.Parallel()
	d := newDirs(t)
	cmd := exec.Command(binary, "serve", "--hosts", d.hosts, "--items", d.items, "--logs", d.logs,
		"--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "TASKHOSTER_LOG_FORMAT=console")
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGKILL); _ = cmd.Wait() })
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	want := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d{4})\tINFO\tlistening\t\{"listener": "api", "addr": "127\.0\.0\.1:\d+"\}$`)
	deadline := time.After(30 * time.Second)
	var seen []string
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("the server's log ended without the api's listening line:\n%s", strings.Join(seen, "\n"))
			}
			seen = append(seen, line)
			if want.MatchString(line) {
				return
			}
			if strings.HasPrefix(line, "{") {
				t.Fatalf("a JSON line under TASKHOSTER_LOG_FORMAT=console: %s", line)
			}
		case <-deadline:
			t.Fatalf("no console listening line within 30s:\n%s", strings.Join(seen, "\n"))
		}
	}
}

// TestServeRefusesABadLogSetting: a bad --log-level or --log-format is a
// wrong command line (exit 2) naming the choices; nothing is started.
func TestServeRefusesABadLogSetting(t *testing.T) {
	t.Parallel()
	d := newDirs(t)
	for _, c := range []struct{ flag, value, want string }{
		{"--log-level", "loud", "--log-level must be debug, info, warn or error"},
		{"--log-format", "xml", "--log-format must be auto, console or json"},
	} {
		cmd := exec.Command(binary, "serve", "--hosts", d.hosts, "--items", d.items, "--logs", d.logs,
			"--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", c.flag, c.value)
		out, err := cmd.CombinedOutput()
		if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), c.want) {
			t.Errorf("%s %s: %v, output %q; want exit 2 and %q", c.flag, c.value, err, out, c.want)
		}
		if exists(d.items) {
			t.Errorf("%s %s: made the items folder", c.flag, c.value)
		}
	}
}
