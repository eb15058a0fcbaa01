package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/adapters/sqlitelogs"
	"github.com/taskhoster/taskhoster/domain/tasklog"
)

// logsQueues adds the queues the Task Logs tests need to a hosts folder:
//   - archived: alice posts and reads logs, box works; bodies are archived.
//   - private: alice posts, box works, but only eve reads its logs, so
//     alice's mirror must never get its lines.
//
// resize (the fixture's) has logs for alice and no archive.
func logsQueues(t *testing.T, d dirs) {
	t.Helper()
	queues := filepath.Join(d.hosts, host, "taskhoster-queues")
	writeFile(t, filepath.Join(queues, "archived.json"), `{
		"item": {"type": "object"},
		"settings": {"leaseSeconds": 300, "taskhoster-archivePayloads": true},
		"access": {"post": ["alice"], "status": ["alice"], "work": ["box"], "logs": ["alice"]}
	}`)
	writeFile(t, filepath.Join(queues, "private.json"), `{
		"item": {},
		"settings": {"leaseSeconds": 300, "taskhoster-archivePayloads": true},
		"access": {"post": ["alice"], "status": ["alice"], "work": ["box"], "logs": ["eve"]}
	}`)
}

// aliceReads are the queues whose lines alice's mirror gets.
func aliceReads() []string { return []string{"archived", "resize"} }

// finishTask walks a task through its life on queue: posted by alice,
// claimed by box, two progress reports, a result, and alice's read of it
// (fetched). It returns the id.
func (s *server) finishTask(queue string, n int) string {
	s.t.Helper()
	id := s.post(queue, aliceToken, fmt.Sprintf(`{"url":"https://ex.com/%d.png","n":%d}`, n, n))
	claim := s.do("POST", "/"+queue+"/claim", boxToken, `{"worker":"box-1","wait":5}`)
	if claim.Status != 200 || claim.JSON(s.t)["id"] != id {
		s.t.Fatalf("claim on %s: %d %s, want task %s", queue, claim.Status, claim.Body, id)
	}
	for _, pct := range []int{40, 90} {
		r := s.do("POST", "/"+queue+"/"+id+"/progress", boxToken, fmt.Sprintf(`{"worker":"box-1","progress":{"percent":%d}}`, pct))
		if r.Status != 200 || r.JSON(s.t)["accepted"] != true {
			s.t.Fatalf("progress: %d %s", r.Status, r.Body)
		}
	}
	r := s.do("POST", "/"+queue+"/"+id+"/result", boxToken, fmt.Sprintf(`{"worker":"box-1","result":{"url":"https://ex.com/%d.jpg"}}`, n))
	if r.Status != 200 || r.JSON(s.t)["accepted"] != true {
		s.t.Fatalf("result: %d %s", r.Status, r.Body)
	}
	if r := s.do("GET", "/"+queue+"/"+id, aliceToken, ""); r.Status != 200 {
		s.t.Fatalf("status: %d %s", r.Status, r.Body)
	}
	return id
}

// readableLines are the lines of the server's day files that alice's
// mirror should hold, as they are in the files.
func (s *server) readableLines() []string {
	s.t.Helper()
	var days [][]byte
	if url := s.databaseURL(); url != "" {
		days = append(days, databaseLines(s.t, url))
	}
	files, _ := filepath.Glob(filepath.Join(s.log, "tasks", "*.jsonl"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			s.t.Fatal(err)
		}
		days = append(days, data)
	}
	var out []string
	for _, data := range days {
		for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
			var ev struct{ Host, Queue string }
			if json.Unmarshal([]byte(line), &ev) == nil && ev.Host == host && slices.Contains(aliceReads(), ev.Queue) {
				out = append(out, line)
			}
		}
	}
	return out
}

// logsRun is one finished run of `taskhoster logs ...`.
type logsRun struct {
	stdout, stderr string
	code           int
}

// logsCommand is the binary with args, without the tester's TASKHOSTER_
// settings in its environment.
func logsCommand(args ...string) *exec.Cmd {
	cmd := exec.Command(binary, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TASKHOSTER_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "GORACE=halt_on_error=1")
	return cmd
}

// pullArgs are the arguments of a pull from s as alice into store.
func (s *server) pullArgs(store string, extra ...string) []string {
	return append([]string{"logs", "pull", "--server", s.url, "--host", host, "--token", aliceToken, "--store", store}, extra...)
}

// logsPull runs a pull from s into store and waits for it.
func (s *server) logsPull(store string, extra ...string) logsRun {
	s.t.Helper()
	cmd := logsCommand(s.pullArgs(store, extra...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		s.t.Fatalf("logs pull did not end within 60s; stderr: %s", stderr.String())
	}
	return logsRun{stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()}
}

// mustPull pulls and returns the number of new lines the summary reports.
func (s *server) mustPull(store string, extra ...string) int {
	s.t.Helper()
	r := s.logsPull(store, extra...)
	if r.code != 0 {
		s.t.Fatalf("logs pull exited %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	m := regexp.MustCompile(`(\d+) new lines?`).FindStringSubmatch(r.stdout)
	if m == nil {
		s.t.Fatalf("logs pull printed no summary: %q", r.stdout)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// mirrored is every line in the mirror at store, in the order of the
// server's files (the mirror's own order is by time).
func mirrored(t *testing.T, store string) []string {
	t.Helper()
	st, err := sqlitelogs.OpenReader(store)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var lines []tasklog.Line
	q := tasklog.Query{Limit: tasklog.MaxLimit}
	for {
		page, err := st.Events(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, page.Lines...)
		if page.Older == nil {
			break
		}
		q.Before = page.Older
	}
	slices.SortFunc(lines, func(a, b tasklog.Line) int {
		if c := strings.Compare(a.Key.Day, b.Key.Day); c != 0 {
			return c
		}
		return int(a.Key.Offset - b.Key.Offset)
	})
	raw := make([]string, len(lines))
	for i, l := range lines {
		raw[i] = l.Raw
	}
	return raw
}

// storedLines counts the mirror's lines, or is -1 while there is no mirror
// to read (a pull is still creating it).
func storedLines(store string) int {
	st, err := sqlitelogs.OpenReader(store)
	if err != nil {
		return -1
	}
	defer st.Close()
	page, err := st.Events(context.Background(), tasklog.Query{Limit: tasklog.MaxLimit})
	if err != nil {
		return -1
	}
	return len(page.Lines)
}

// payload is a stored body of the mirror, or "" if it has none.
func payload(t *testing.T, store, queue, id, file string) string {
	t.Helper()
	st, err := sqlitelogs.OpenReader(store)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b, err := st.Payload(context.Background(), host, queue, id, file)
	if err != nil {
		return ""
	}
	return string(b)
}

func TestLogsPullMirrorsKeepsAndAddsOnlyNewLines(t *testing.T) {
	d := newDirs(t)
	logsQueues(t, d)
	s := start(t, d, "--sync", "none")
	store := t.TempDir()

	var archived []string
	for i := range 3 {
		archived = append(archived, s.finishTask("archived", i))
	}
	s.finishTask("resize", 10)
	s.finishTask("private", 20)
	want := s.readableLines()
	if len(want) != 4*6 {
		t.Fatalf("the server logged %d readable lines, want 24", len(want))
	}

	// First pull: every readable line, none of the private queue's.
	if n := s.mustPull(store); n != len(want) {
		t.Errorf("first pull reported %d new lines, want %d", n, len(want))
	}
	if diff := cmp.Diff(want, mirrored(t, store)); diff != "" {
		t.Fatalf("mirror after the first pull (-server +mirror):\n%s", diff)
	}
	// Every archived body: the item, both progress lines, the result.
	for i, id := range archived {
		checks := map[string]string{
			"item.json":      fmt.Sprintf(`{"url":"https://ex.com/%d.png","n":%d}`, i, i),
			"progress.jsonl": "{\"percent\":40}\n{\"percent\":90}\n",
			"result.json":    fmt.Sprintf(`{"url":"https://ex.com/%d.jpg"}`, i),
		}
		for file, body := range checks {
			if got := payload(t, store, "archived", id, file); got != body {
				t.Errorf("task %s %s = %q, want %q", id, file, got, body)
			}
		}
	}

	// Second pull right after: nothing new.
	if n := s.mustPull(store); n != 0 {
		t.Errorf("second pull reported %d new lines, want 0", n)
	}
	if got := mirrored(t, store); len(got) != len(want) {
		t.Errorf("second pull changed the mirror to %d lines, want %d", len(got), len(want))
	}

	// More tasks: only their lines come.
	s.finishTask("archived", 3)
	s.finishTask("private", 21)
	want = s.readableLines()
	if n := s.mustPull(store); n != 6 {
		t.Errorf("third pull reported %d new lines, want 6", n)
	}
	if diff := cmp.Diff(want, mirrored(t, store)); diff != "" {
		t.Fatalf("mirror after the third pull (-server +mirror):\n%s", diff)
	}

	// The server prunes: its day files and archive go (what the sweep does
	// past --log-days, done by hand while it is stopped).
	s.stop()
	for _, dir := range []string{"tasks", "tasks-payloads"} {
		entries, _ := os.ReadDir(filepath.Join(d.logs, dir))
		for _, e := range entries {
			if err := os.RemoveAll(filepath.Join(d.logs, dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	s = start(t, d, "--sync", "none")
	if got := s.readableLines(); len(got) != 0 {
		t.Fatalf("the server still has %d lines after pruning", len(got))
	}
	if n := s.mustPull(store); n != 0 {
		t.Errorf("pull after pruning reported %d new lines, want 0", n)
	}
	if diff := cmp.Diff(want, mirrored(t, store)); diff != "" {
		t.Errorf("mirror after the server pruned (-before +after):\n%s", diff)
	}
	if got := payload(t, store, "archived", archived[0], "result.json"); got != `{"url":"https://ex.com/0.jpg"}` {
		t.Errorf("a pruned payload left the mirror: result.json = %q", got)
	}
}

func TestLogsPullResumesAfterInterruption(t *testing.T) {
	d := newDirs(t)
	logsQueues(t, d)
	s := start(t, d, "--sync", "none")
	for i := range 4 {
		s.finishTask("archived", i)
	}
	want := s.readableLines()

	// A pull that stops after 5 lines, committed 2 at a time, leaves
	// exactly the first 5; the next pull brings the rest, and only it.
	store := t.TempDir()
	if n := s.mustPull(store, "--batch", "2", "--limit", "5"); n != 5 {
		t.Fatalf("limited pull reported %d new lines, want 5", n)
	}
	if diff := cmp.Diff(want[:5], mirrored(t, store)); diff != "" {
		t.Fatalf("mirror after the limited pull (-want +got):\n%s", diff)
	}
	if n := s.mustPull(store, "--batch", "2"); n != len(want)-5 {
		t.Errorf("resumed pull reported %d new lines, want %d", n, len(want)-5)
	}
	if diff := cmp.Diff(want, mirrored(t, store)); diff != "" {
		t.Errorf("mirror after resuming (-want +got):\n%s", diff)
	}

	// A pull killed outright (SIGKILL, no clean-up) once it has committed
	// something: the next pull still ends with every line once and every
	// payload.
	for i := 4; i < 30; i++ {
		s.finishTask("archived", i)
	}
	want = s.readableLines()
	killed := t.TempDir()
	cmd := logsCommand(s.pullArgs(killed, "--batch", "1")...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	eventually(t, "the pull to commit a line", func() bool {
		select {
		case <-exited:
			return true // done before we looked: nothing left to interrupt
		default:
		}
		return storedLines(killed) > 0
	})
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
	t.Logf("the killed pull had stored %d of %d lines", storedLines(killed), len(want))

	s.mustPull(killed)
	if diff := cmp.Diff(want, mirrored(t, killed)); diff != "" {
		t.Errorf("mirror after a killed pull and a new one (-want +got):\n%s", diff)
	}
	var ids []string
	for _, line := range want {
		var ev struct{ ID, Event string }
		_ = json.Unmarshal([]byte(line), &ev)
		if ev.Event == "posted" {
			ids = append(ids, ev.ID)
		}
	}
	for _, id := range ids {
		for _, file := range []string{"item.json", "progress.jsonl", "result.json"} {
			if payload(t, killed, "archived", id, file) == "" {
				t.Errorf("task %s has no %s after the resumed pull", id, file)
			}
		}
	}
}

func TestLogsPullRefusesBadCommandLines(t *testing.T) {
	for _, args := range [][]string{
		{"logs"},
		{"logs", "nothing"},
		{"logs", "pull", "--token", aliceToken},  // no store
		{"logs", "pull", "--store", t.TempDir()}, // no token
		{"logs", "pull", "--store", t.TempDir(), "--token", aliceToken, "--every", "0s"},
		{"logs", "pull", "--store", t.TempDir(), "--token", aliceToken, "extra"},
		{"logs", "serve"}, // no store
	} {
		cmd := logsCommand(args...)
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != 2 {
			t.Errorf("taskhoster %v exited %d, want 2: %s", args, code, out)
		}
	}
	// A store that was never pulled is an error for serve, with the fix.
	cmd := logsCommand("logs", "serve", "--store", t.TempDir(), "--addr", "127.0.0.1:0")
	out, _ := cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 1 || !strings.Contains(string(out), "logs pull") {
		t.Errorf("serve of an empty folder: %d %s", cmd.ProcessState.ExitCode(), out)
	}
}

func TestLogsPullReportsAWrongToken(t *testing.T) {
	d := newDirs(t)
	s := start(t, d, "--sync", "none")
	store := t.TempDir()
	cmd := logsCommand("logs", "pull", "--server", s.url, "--host", host, "--token", boxToken, "--store", store)
	out, _ := cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 1 || !strings.Contains(string(out), "403") {
		t.Errorf("pull as a user without logs access: %d %s", cmd.ProcessState.ExitCode(), out)
	}
}
