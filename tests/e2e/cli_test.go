package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// cliQueues adds the queues the command-line tests need to a hosts folder
// (before the server starts, so nothing waits for a reload):
//   - bulk: everything public, a long lease, results of any shape.
//   - strict: results must carry a "url", so an error result is refused.
func cliQueues(t *testing.T, d dirs) {
	t.Helper()
	queues := filepath.Join(d.hosts, host, "taskhoster-queues")
	writeFile(t, filepath.Join(queues, "bulk.json"), `{
		"item": {}, "result": {"type": "object"},
		"settings": {"leaseSeconds": 300},
		"access": {"post": "public", "status": "public", "work": "public"}
	}`)
	writeFile(t, filepath.Join(queues, "strict.json"), `{
		"item": {}, "result": {"type": "object", "required": ["url"]},
		"settings": {"leaseSeconds": 300},
		"access": {"post": "public", "status": "public", "work": "public"}
	}`)
}

// cliRun is one finished run of the binary as a client.
type cliRun struct {
	stdout, stderr string
	code           int
}

// cli runs the binary with args against s (TASKHOSTER_SERVER and
// TASKHOSTER_HOST in its environment), feeding it stdin, and waits for it.
func (s *server) cli(stdin string, args ...string) cliRun {
	s.t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = s.cliEnv()
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		s.t.Fatalf("taskhoster %v did not end within 60s; stderr: %s", args, stderr.String())
	}
	return cliRun{stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()}
}

func (s *server) cliEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TASKHOSTER_") { // the tester's own settings stay out
			env = append(env, kv)
		}
	}
	return append(env, "TASKHOSTER_SERVER="+s.url, "TASKHOSTER_HOST="+host, "GORACE=halt_on_error=1")
}

// cliProc is the binary running in the background as a client.
type cliProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	lines  chan string // stdout, line by line; closed at its end
	exited chan struct{}
	stderr *syncBuffer
}

func (s *server) cliStart(args ...string) *cliProc {
	s.t.Helper()
	p := &cliProc{t: s.t, cmd: exec.Command(binary, args...), lines: make(chan string, 100),
		exited: make(chan struct{}), stderr: &syncBuffer{}}
	p.cmd.Env = s.cliEnv()
	p.cmd.Stderr = p.stderr
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		s.t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	s.t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	})
	return p
}

// line is the next line of stdout, waiting at most 20 s.
func (p *cliProc) line() string {
	p.t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			p.t.Fatalf("stdout ended; stderr: %s", p.stderr.String())
		}
		return l
	case <-time.After(20 * time.Second):
		p.t.Fatalf("no line within 20s; stderr: %s", p.stderr.String())
		return ""
	}
}

// wait waits at most 30 s for the process to end and returns its exit code.
func (p *cliProc) wait() int {
	p.t.Helper()
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(30 * time.Second):
		p.t.Fatalf("did not exit within 30s; stderr: %s", p.stderr.String())
		return -1
	}
}

// syncBuffer is a buffer the process writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

var idPattern = regexp.MustCompile(`^[0-9a-f]{16}$`)

// view reads a task's status view over HTTP, as a map.
func (s *server) view(queue, token, id string) map[string]any {
	s.t.Helper()
	r := s.do("GET", "/"+queue+"/"+id, token, "")
	if r.Status != 200 {
		s.t.Fatalf("status of %s: %d %s", id, r.Status, r.Body)
	}
	return r.JSON(s.t)
}

func jsonOf(v any) string {
	out, _ := json.Marshal(v)
	return string(out)
}

// TestCLIPostStatusWatch: post (ITEM argument, stdin, "-"), status and
// watch, with flags before and after the arguments, and the server's
// errors on stderr with a non-zero exit.
func TestCLIPostStatusWatch(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t))

	var ids []string
	for _, c := range []struct {
		stdin string
		args  []string
	}{
		{"", []string{"post", "resize", `{"url":"arg"}`, "--token", aliceToken}},
		{`{"url":"stdin"}`, []string{"post", "--token", aliceToken, "resize"}},
		{`{"url":"dash"}`, []string{"post", "--token=" + aliceToken, "resize", "-"}},
	} {
		r := s.cli(c.stdin, c.args...)
		id := strings.TrimSpace(r.stdout)
		if r.code != 0 || !idPattern.MatchString(id) {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q", c.args, r.code, r.stdout, r.stderr)
		}
		ids = append(ids, id)
	}
	for i, url := range []string{"arg", "stdin", "dash"} {
		r := s.cli("", "status", "resize", ids[i], "--token", aliceToken)
		var v map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &v); r.code != 0 || err != nil {
			t.Fatalf("status: exit %d, %v, stdout %q, stderr %q", r.code, err, r.stdout, r.stderr)
		}
		if v["id"] != ids[i] || v["status"] != "pending" || v["queue"] != "resize" {
			t.Errorf("status of the %s task = %v", url, v)
		}
	}

	// The server's refusals: code, status, message and each violation.
	for _, c := range []struct {
		name, stdin string
		args        []string
		want        []string
	}{
		{"bad item", "", []string{"post", "resize", `{"width":0}`, "--token", aliceToken},
			[]string{"invalid_item (422)", "\n  /"}},
		{"no token", "", []string{"post", "resize", `{"url":"a"}`}, []string{"unauthorized (401)"}},
		{"not JSON", "", []string{"post", "resize", `{url`, "--token", aliceToken}, []string{"not valid JSON"}},
		{"missing task", "", []string{"status", "resize", "0123456789abcdef", "--token", aliceToken}, []string{"(404)"}},
		{"unreachable server", "", []string{"status", "resize", ids[0], "--server", "http://127.0.0.1:1"}, []string{"connection refused"}},
	} {
		r := s.cli(c.stdin, c.args...)
		if r.code == 0 {
			t.Errorf("%s: exit 0, stdout %q", c.name, r.stdout)
		}
		for _, want := range c.want {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("%s: stderr %q lacks %q", c.name, r.stderr, want)
			}
		}
	}
	if r := s.cli("", "post"); r.code != 2 || !strings.Contains(r.stderr, "Usage: taskhoster post") {
		t.Errorf("post without a queue: exit %d, stderr %q", r.code, r.stderr)
	}

	// watch prints one line per view, driven here one step per line.
	id := ids[0]
	w := s.cliStart("watch", "--token", aliceToken, "resize", id)
	step := func(method, path, body string) {
		if r := s.do(method, path, boxToken, body); r.Status != 200 {
			t.Fatalf("%s %s: %d %s", method, path, r.Status, r.Body)
		}
	}
	var got []string
	for _, next := range []func(){
		func() { step("POST", "/resize/claim", `{"worker":"w"}`) },
		func() { step("POST", "/resize/"+id+"/progress", `{"worker":"w","progress":{"percent":10}}`) },
		func() { step("POST", "/resize/"+id+"/result", `{"worker":"w","result":{"ok":true}}`) },
		func() {},
	} {
		got = append(got, summary(t, []byte(w.line())))
		next()
	}
	if code := w.wait(); code != 0 {
		t.Errorf("watch exited %d: %s", code, w.stderr.String())
	}
	if _, more := <-w.lines; more {
		t.Error("watch printed more after the terminal view")
	}
	want := []string{
		"pending 0 null null",
		"processing 1 null null",
		`processing 1 {"percent":10} null`,
		`finished 1 {"percent":10} {"ok":true}`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("watch lines (-want +got):\n%s", diff)
	}
}

// TestCLIWorkOnce: `cat` as an echo worker hands the item back as the
// result; --query picks the task; --once ends after one.
func TestCLIWorkOnce(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t))
	one := s.post("resize", aliceToken, `{"url": "one", "width": 1}`)
	two := s.post("resize", aliceToken, `{"url": "two", "width": 2}`)

	r := s.cli("", "work", "resize", "--exec", "cat", "--once", "--token", boxToken,
		"--worker", "cli-1", "--query", `{"properties":{"width":{"const":2}}}`)
	if r.code != 0 {
		t.Fatalf("work --once: exit %d, stderr %s", r.code, r.stderr)
	}
	v := s.view("resize", aliceToken, two)
	if v["status"] != "finished" || jsonOf(v["result"]) != `{"url":"two","width":2}` {
		t.Errorf("the echoed task: %v", v)
	}
	if v := s.view("resize", aliceToken, one); v["status"] != "pending" {
		t.Errorf("the task outside the query: %v", v)
	}
	var workers []any
	for _, ev := range s.events() {
		if ev["id"] == two && ev["event"] == "claimed" {
			workers = append(workers, ev["worker"])
		}
	}
	if diff := cmp.Diff([]any{"cli-1"}, workers); diff != "" {
		t.Errorf("claimed by (-want +got):\n%s", diff)
	}
}

// TestCLIWorkFailingCommand: with --on-error result, a command that exits
// 3 hands in an in-band error result where the result schema allows it, as
// older versions did; where it does not, the worker says so naming the
// task, exits non-zero (--once), and the task goes back to pending.
func TestCLIWorkFailingCommand(t *testing.T) {
	t.Parallel()
	d := newDirs(t)
	cliQueues(t, d)
	s := start(t, d)
	failing := `cat >/dev/null; echo "it broke" >&2; exit 3`

	id := s.post("bulk", "", `{"n":1}`)
	r := s.cli("", "work", "bulk", "--once", "--on-error", "result", "--exec", failing)
	if r.code != 0 || !strings.Contains(r.stderr, "task "+id+" finished in ") || !strings.Contains(r.stderr, "the command exited 3") {
		t.Fatalf("work on bulk: exit %d, stderr %s", r.code, r.stderr)
	}
	v := s.view("bulk", "", id)
	if want := `{"error":{"exitCode":3,"stderr":"it broke\n"}}`; v["status"] != "finished" || jsonOf(v["result"]) != want {
		t.Errorf("bulk task: %v, want finished with %s", v, want)
	}

	// Exit 0 but not JSON on stdout: an error result with exitCode 0.
	id = s.post("bulk", "", `{"n":2}`)
	if r := s.cli("", "work", "bulk", "--once", "--on-error", "result", "--exec", "echo not json"); r.code != 0 {
		t.Fatalf("work with non-JSON stdout: exit %d, stderr %s", r.code, r.stderr)
	}
	if v := s.view("bulk", "", id); jsonOf(v["result"]) != `{"error":{"exitCode":0,"stderr":""}}` {
		t.Errorf("non-JSON stdout: %v", v)
	}

	id = s.post("strict", "", `{"n":3}`)
	r = s.cli("", "work", "strict", "--once", "--on-error", "result", "--exec", failing)
	if r.code == 0 {
		t.Errorf("work on strict: exit 0 although the result was refused")
	}
	for _, want := range []string{"task " + id, "result schema refused", "invalid_result"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr %q lacks %q", r.stderr, want)
		}
	}
	eventually(t, "the refused task to be pending again", func() bool {
		return s.view("strict", "", id)["status"] == "pending"
	})
	if v := s.view("strict", "", id); v["attempts"] != 1.0 || v["result"] != nil {
		t.Errorf("refused task: %v", v)
	}
}

// TestCLIWorkConcurrency: four at a time over twelve tasks, each finished
// and run exactly once; SIGTERM ends the worker with exit 0.
func TestCLIWorkConcurrency(t *testing.T) {
	t.Parallel()
	d := newDirs(t)
	cliQueues(t, d)
	s := start(t, d)
	ran := filepath.Join(t.TempDir(), "ran")

	var ids []string
	for i := range 12 {
		ids = append(ids, s.post("bulk", "", fmt.Sprintf(`{"n":%d}`, i)))
	}
	// Each run appends its item to a file (appends of a short line are
	// atomic) and echoes it back.
	p := s.cliStart("work", "bulk", "--concurrency", "4",
		"--exec", `read -r item; echo "$item" >> '`+ran+`'; echo "{\"echo\":$item}"`)
	eventually(t, "all twelve tasks to finish", func() bool {
		for _, id := range ids {
			if s.view("bulk", "", id)["status"] != "finished" {
				return false
			}
		}
		return true
	})
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(); code != 0 {
		t.Errorf("work after SIGTERM exited %d: %s", code, p.stderr.String())
	}

	for i, id := range ids {
		if got, want := jsonOf(s.view("bulk", "", id)["result"]), fmt.Sprintf(`{"echo":{"n":%d}}`, i); got != want {
			t.Errorf("task %s result %s, want %s", id, got, want)
		}
	}
	data, err := os.ReadFile(ran)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	sort.Strings(lines)
	var want []string
	for i := range 12 {
		want = append(want, fmt.Sprintf(`{"n":%d}`, i))
	}
	sort.Strings(want)
	if diff := cmp.Diff(want, lines); diff != "" {
		t.Errorf("commands run (-want +got):\n%s", diff)
	}
	results := map[string]int{}
	for _, ev := range s.events() {
		if ev["event"] == "result" {
			results[ev["id"].(string)]++
		}
	}
	for _, id := range ids {
		if results[id] != 1 {
			t.Errorf("task %s: %d result events, want 1", id, results[id])
		}
	}
}

// TestCLIWorkDrainsOnSIGTERM: a task running when SIGTERM arrives is
// finished and handed in before the worker exits 0.
func TestCLIWorkDrainsOnSIGTERM(t *testing.T) {
	t.Parallel()
	d := newDirs(t)
	cliQueues(t, d)
	s := start(t, d)
	dir := t.TempDir()
	started, gate := filepath.Join(dir, "started"), filepath.Join(dir, "gate")
	if err := syscall.Mkfifo(gate, 0o600); err != nil {
		t.Fatal(err)
	}
	id := s.post("bulk", "", `{"n":1}`)
	// The command says it started, then blocks until the test opens the gate.
	p := s.cliStart("work", "bulk", "--exec",
		`cat >/dev/null; touch '`+started+`'; read -r line < '`+gate+`'; echo "{\"done\":true}"`)
	eventually(t, "the command to start", func() bool { return exists(started) })
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Opening the FIFO for writing waits for the command's read end.
	if err := os.WriteFile(gate, []byte("go\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(); code != 0 {
		t.Errorf("work exited %d: %s", code, p.stderr.String())
	}
	if v := s.view("bulk", "", id); v["status"] != "finished" || jsonOf(v["result"]) != `{"done":true}` {
		t.Errorf("the task running at SIGTERM: %v", v)
	}
}

// TestCLIWorkOnceStoppedBeforeATask: `work --once` stopped (SIGTERM) before
// any task came handled nothing, so it exits 1, as its help says, not 0
// as if it had done its task.
func TestCLIWorkOnceStoppedBeforeATask(t *testing.T) {
	t.Parallel()
	d := newDirs(t)
	cliQueues(t, d)
	s := start(t, d)
	p := s.cliStart("work", "bulk", "--once", "--exec", "cat")
	// The first line is written once SIGTERM drains rather than kills.
	eventually(t, "the worker to start", func() bool {
		return strings.Contains(p.stderr.String(), "handling one task")
	})
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(); code != 1 {
		t.Errorf("work --once stopped before a task exited %d, want 1: %s", code, p.stderr.String())
	}
}
