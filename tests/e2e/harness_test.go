// Package e2e starts the real taskhoster binary on loopback ports and talks
// to it as clients do: HTTP requests, files on disc, lines in the event log.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskhoster/taskhoster/internal/pgtest"
	"github.com/taskhoster/taskhoster/tests/testbin"
)

// binary is the taskhoster binary built once for the whole package.
var binary string

func TestMain(m *testing.M) {
	code := testbin.Main(m, raceEnabled, &binary)
	pgtest.Stop() // the cluster of the PostgreSQL tests, if they started one
	os.Exit(code)
}

// Tokens of the fixture users.
const (
	aliceToken = "a11ce0000000000000000000000000a1"
	boxToken   = "b0b0000000000000000000000000b0b0"
	eveToken   = "e0e0000000000000000000000000e0e0"
	host       = "task.example.com"
)

// fixture writes a hosts folder with one host and a few queues:
//   - resize: post/status alice, work box; the seeds' example schemas.
//   - public: everything public, short lease and queue timeout.
func fixture(t *testing.T, dir string) {
	t.Helper()
	writeFile(t, filepath.Join(dir, host, "taskhoster-users", "alice.json"), `{"name":"alice","token":"`+aliceToken+`"}`)
	writeFile(t, filepath.Join(dir, host, "taskhoster-users", "box.json"), `{"name":"box","token":"`+boxToken+`"}`)
	writeFile(t, filepath.Join(dir, host, "taskhoster-users", "eve.json"), `{"name":"eve","token":"`+eveToken+`"}`)
	writeFile(t, filepath.Join(dir, host, "taskhoster-queues", "resize.json"), `{
		"item": {"type":"object","required":["url"],"properties":{"url":{"type":"string"},"width":{"type":"integer","minimum":1}}},
		"progress": {"type":"object","properties":{"percent":{"type":"number"}}},
		"result": {"type":"object"},
		"settings": {"leaseSeconds": 60, "maxItemBytes": 4096},
		"access": {"post":["alice"], "status":["alice"], "work":["box"], "logs":["alice"]}
	}`)
	writeFile(t, filepath.Join(dir, host, "taskhoster-queues", "public.json"), `{
		"item": {},
		"settings": {"leaseSeconds": 1, "queueSeconds": 3, "retainSeconds": 1},
		"access": {"post":"public", "status":"public", "work":"public"}
	}`)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// server is one running taskhoster process and its folders.
type server struct {
	t                 *testing.T
	hosts, items, log string
	url, admin        string
	cmd               *exec.Cmd
	exited            chan struct{}

	mu     sync.Mutex
	stderr bytes.Buffer
}

// dirs are a server's folders, reused across restarts.
type dirs struct{ hosts, items, logs string }

func newDirs(t *testing.T) dirs {
	root := t.TempDir()
	d := dirs{filepath.Join(root, "hosts"), filepath.Join(root, "items"), filepath.Join(root, "logs")}
	fixture(t, d.hosts)
	return d
}

// start runs the binary on d with extra flags and waits until it listens.
func start(t *testing.T, d dirs, extra ...string) *server {
	t.Helper()
	s, err := launch(t, d, extra...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func launch(t *testing.T, d dirs, extra ...string) (*server, error) {
	t.Helper()
	return launchEnv(t, d, nil, extra...)
}

// startAfterReboot is start as the first start after the machine booted
// again (a power loss): the journal a crashed server left is replayed.
func startAfterReboot(t *testing.T, d dirs, extra ...string) *server {
	t.Helper()
	s, err := launchEnv(t, d, []string{"TASKHOSTER_TEST_BOOT_ID=" + t.Name() + "-" + strconv.FormatInt(time.Now().UnixNano(), 10)}, extra...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func launchEnv(t *testing.T, d dirs, env []string, extra ...string) (*server, error) {
	t.Helper()
	args := append([]string{"serve",
		"--hosts", d.hosts, "--items", d.items, "--logs", d.logs,
		"--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--sweep", "100ms",
	}, extra...)
	s := &server{t: t, hosts: d.hosts, items: d.items, log: d.logs, exited: make(chan struct{})}
	s.cmd = exec.Command(binary, args...)
	s.cmd.Env = append(append(os.Environ(), "GORACE=halt_on_error=1"), env...)
	pipe, err := s.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	listening := make(chan struct{})
	// Wait closes the pipe, so it runs only once the log is read to its
	// end: an exit's last lines (why it refused to start) are kept.
	go func() {
		s.readLog(pipe, listening)
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(s.kill)
	select {
	case <-listening:
		return s, nil
	case <-s.exited:
		return s, fmt.Errorf("server exited before listening: %s", s.Stderr())
	case <-time.After(30 * time.Second):
		s.kill()
		return s, fmt.Errorf("server did not listen within 30s: %s", s.Stderr())
	}
}

// readLog keeps the server's log and picks the bound addresses out of it.
func (s *server) readLog(r io.Reader, listening chan struct{}) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		s.mu.Lock()
		s.stderr.WriteString(line + "\n")
		s.mu.Unlock()
		listener, addr, ok := testbin.Listening(line)
		if !ok {
			continue
		}
		s.mu.Lock()
		if listener == "api" {
			s.url = "http://" + addr
		} else {
			s.admin = "http://" + addr
		}
		both := s.url != "" && s.admin != ""
		s.mu.Unlock()
		if both {
			close(listening)
		}
	}
	_, _ = io.Copy(io.Discard, r)
}

// Stderr is everything the server logged so far.
func (s *server) Stderr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stderr.String()
}

// kill ends the server with SIGKILL: no shutdown, as in a crash.
func (s *server) kill() {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
}

// stop ends the server with SIGTERM and waits for a clean exit.
func (s *server) stop() {
	s.t.Helper()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		s.t.Fatalf("server did not stop within 30s")
	}
	if code := s.cmd.ProcessState.ExitCode(); code != 0 {
		s.t.Fatalf("server exited %d: %s", code, s.Stderr())
	}
}

// response is an HTTP answer, read whole.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into a map.
func (r response) JSON(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("body %q is not a JSON object: %v", r.Body, err)
	}
	return m
}

// do sends a request to the API with the fixture host and token (if any).
func (s *server) do(method, path, token, body string) response {
	s.t.Helper()
	return s.doHost(method, path, host, token, body)
}

func (s *server) doHost(method, path, hostHeader, token, body string) response {
	s.t.Helper()
	return s.doHeader(method, path, hostHeader, token, body, nil)
}

// doHeader is doHost with extra request headers.
func (s *server) doHeader(method, path, hostHeader, token, body string, header http.Header) response {
	s.t.Helper()
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Host = hostHeader
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return response{Status: resp.StatusCode, Header: resp.Header, Body: data}
}

// post posts item to queue as alice (or anonymously on public) and returns the id.
func (s *server) post(queue, token, item string) string {
	s.t.Helper()
	r := s.do("POST", "/"+queue, token, item)
	if r.Status != http.StatusCreated {
		s.t.Fatalf("post %s: %d %s", item, r.Status, r.Body)
	}
	return r.JSON(s.t)["id"].(string)
}

// events reads every line of the event log, in file order across days.
func (s *server) events() []map[string]any {
	s.t.Helper()
	var days [][]byte
	if url := s.databaseURL(); url != "" {
		days = [][]byte{databaseLines(s.t, url)}
	}
	files, _ := filepath.Glob(filepath.Join(s.log, "tasks", "*.jsonl"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			s.t.Fatal(err)
		}
		days = append(days, data)
	}
	var out []map[string]any
	for _, data := range days {
		for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
			if len(line) == 0 {
				continue
			}
			var ev map[string]any
			if err := json.Unmarshal(line, &ev); err != nil {
				s.t.Fatalf("event log line %q: %v", line, err)
			}
			out = append(out, ev)
		}
	}
	return out
}

// databaseURL is the --database-url of a server on PostgreSQL, "" for one
// on files.
func (s *server) databaseURL() string {
	args := s.cmd.Args
	for i := range args {
		if args[i] == "--database-url" && i+1 < len(args) && slices.Contains(args, "postgres") {
			return args[i+1]
		}
	}
	return ""
}

// databaseLines is every line of the event log in the database at url,
// in day and offset order: the day files' bytes, one after the other.
func databaseLines(t *testing.T, url string) []byte {
	t.Helper()
	var out []byte
	onDatabase(t, url, func(ctx context.Context, conn *pgx.Conn) error {
		// Lines not placed yet (off NULL: no reader has asked since they
		// were committed) will be placed after the others, in insertion order.
		rows, err := conn.Query(ctx, `SELECT line FROM event_lines ORDER BY day, off NULLS LAST, seq`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var line []byte
			if err := rows.Scan(&line); err != nil {
				return err
			}
			out = append(out, line...)
		}
		return rows.Err()
	})
	return out
}

// eventsOf lists the event names logged for one task, in order.
func (s *server) eventsOf(id string) []string {
	var names []string
	for _, ev := range s.events() {
		if ev["id"] == id {
			names = append(names, ev["event"].(string))
		}
	}
	return names
}

// eventually retries cond until it holds or 10 s pass. Each try is cheap
// (a file read or a request), and the wait between tries is short.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

// taskFile is the path of a task's file in a state directory.
func (s *server) taskFile(queue, state, id string) string {
	return filepath.Join(s.items, host, queue, state, id+".json")
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
