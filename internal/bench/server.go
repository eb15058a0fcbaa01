package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Target is the queue the bench talks to: where, as which host, with which
// token (empty: anonymous).
type Target struct {
	URL   string // http://127.0.0.1:PORT
	Host  string // the Host header
	Token string
	Queue string
	// Priorities has every post carry a priority (-5 to 5, in turn): the
	// failure-model workload (Config.Features).
	Priorities bool
}

// Bench host and queue of a server the bench starts itself. Everything on
// it is public, so no token is needed.
const (
	benchHost  = "bench.local"
	benchQueue = "bench"
)

// Folders is one server's data: a hosts folder with the bench queue, the
// items and the logs, all under Root.
type Folders struct {
	Root, Hosts, Items, Logs string
	Features                 bool // the bench queue uses SPEC §11 (see Config.Features)
}

// NewFolders makes a fresh folder under parent (which must be on the disc
// under test) with a hosts folder holding the public bench queue; with
// features, one that uses SPEC §11's failure model (Config.Features).
func NewFolders(parent string, features bool) (Folders, error) {
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return Folders{}, err
	}
	root, err := os.MkdirTemp(parent, "taskhoster-bench-")
	if err != nil {
		return Folders{}, err
	}
	f := Folders{
		Root:     root,
		Hosts:    filepath.Join(root, "hosts"),
		Items:    filepath.Join(root, "items"),
		Logs:     filepath.Join(root, "logs"),
		Features: features,
	}
	queues := filepath.Join(f.Hosts, benchHost, "taskhoster-queues")
	if err := os.MkdirAll(queues, 0o755); err != nil {
		return Folders{}, err
	}
	// Any item; default lease, timeout and retention (an hour), so nothing
	// the sweep does interferes with a run.
	queue := `{"item": {}, "access": {"post": "public", "status": "public", "work": "public", "logs": "public"}}`
	if features {
		// Every claim is made durable before it is answered (maxAttempts),
		// and a failure would back off; the posts carry priorities.
		queue = `{"item": {}, "settings": {"maxAttempts": 5, "retryBaseSeconds": 1, "retryMaxSeconds": 60},
			"access": {"post": "public", "status": "public", "work": "public", "logs": "public"}}`
	}
	if err := os.WriteFile(filepath.Join(queues, benchQueue+".json"), []byte(queue), 0o644); err != nil {
		return Folders{}, err
	}
	return f, nil
}

// PendingDir is where the bench queue's pending task files live.
func (f Folders) PendingDir() string {
	return filepath.Join(f.Items, benchHost, benchQueue, "pending")
}

// Remove deletes the folder and waits for the deletion to reach the disc,
// so that its write-back does not land in the next measurement.
func (f Folders) Remove() error {
	err := os.RemoveAll(f.Root)
	syscall.Sync()
	return err
}

// Server is a taskhoster process the bench started.
type Server struct {
	Target
	Admin   string        // http://127.0.0.1:PORT of /metrics
	Startup time.Duration // from exec to the API listening
	Folders Folders

	cmd    *exec.Cmd
	exited chan struct{}
	logf   *os.File // the server's log after start-up
}

// StartServer runs `binary serve` on f with the given sync mode, on
// loopback ports the kernel picks, and waits until it listens (at most
// timeout). extra are more flags of serve (say, --store postgres). Its
// log goes to f.Root/server-*.log, so several servers may share f.
func StartServer(binary string, f Folders, sync string, timeout time.Duration, extra ...string) (*Server, error) {
	logf, err := os.CreateTemp(f.Root, "server-*.log")
	if err != nil {
		return nil, err
	}
	args := []string{"serve",
		"--hosts", f.Hosts, "--items", f.Items, "--logs", f.Logs,
		"--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--sync", sync}
	cmd := exec.Command(binary, append(args, extra...)...)
	// A stray TASKHOSTER_* in the caller's shell (say, a --sweep) must not
	// change what is measured.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TASKHOSTER_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	pipe, err := cmd.StderrPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	s := &Server{
		Target:  Target{Host: benchHost, Queue: benchQueue, Priorities: f.Features},
		Folders: f, cmd: cmd, exited: make(chan struct{}), logf: logf,
	}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", binary, err)
	}
	type addrs struct{ api, admin string }
	listening := make(chan addrs, 1)
	go func() {
		defer close(s.exited)
		s.readLog(pipe, func(api, admin string) { listening <- addrs{api, admin} })
		_ = cmd.Wait()
	}()
	select {
	case a := <-listening:
		s.Startup = time.Since(t0)
		s.URL, s.Admin = "http://"+a.api, "http://"+a.admin
		return s, nil
	case <-s.exited:
		return nil, fmt.Errorf("server exited before listening: %s", s.LogTail())
	case <-time.After(timeout):
		s.Kill()
		return nil, fmt.Errorf("server did not listen within %s: %s", timeout, s.LogTail())
	}
}

// readLog reads the log until both listeners are announced, calls up with
// their addresses, then copies the rest to the log file.
func (s *Server) readLog(r io.Reader, up func(api, admin string)) {
	br := bufio.NewReaderSize(r, 1<<16)
	var api, admin string
	for api == "" || admin == "" {
		line, err := br.ReadBytes('\n')
		_, _ = s.logf.Write(line)
		if err != nil {
			return
		}
		var entry struct{ Msg, Listener, Addr string }
		if json.Unmarshal(line, &entry) != nil || entry.Msg != "listening" {
			continue
		}
		if entry.Listener == "api" {
			api = entry.Addr
		} else {
			admin = entry.Addr
		}
	}
	up(api, admin)
	_, _ = io.Copy(s.logf, br)
}

// LogTail is the end of the server's log, for error messages.
func (s *Server) LogTail() string {
	data, _ := os.ReadFile(s.logf.Name())
	if len(data) > 2000 {
		data = data[len(data)-2000:]
	}
	return string(data)
}

// Pid is the server's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Stop ends the server with SIGTERM (it flushes the event log and
// re-queues socket tasks) and waits for it; after a minute it kills it.
func (s *Server) Stop() error {
	defer s.logf.Close()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(time.Minute):
		s.Kill()
		return errors.New("server did not stop within a minute; killed")
	}
	if code := s.cmd.ProcessState.ExitCode(); code != 0 {
		return fmt.Errorf("server exited %d: %s", code, s.LogTail())
	}
	return nil
}

// Kill ends the server at once.
func (s *Server) Kill() {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
}

// RSS reads a process's resident set size from /proc/<pid>/status.
func RSS(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(data)) {
		rest, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("VmRSS line %q", line)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		return kb * 1024, err
	}
	return 0, errors.New("no VmRSS in /proc status")
}

// Metric reads one unlabelled gauge from a Prometheus text endpoint.
func Metric(ctx context.Context, hc *http.Client, url, name string) (float64, error) {
	data, err := scrape(ctx, hc, url)
	if err != nil {
		return 0, err
	}
	v, err := parseMetrics(data, []string{name})
	if err != nil {
		return 0, err
	}
	return v[0], nil
}

// scrape reads url/metrics.
func scrape(ctx context.Context, hc *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// parseMetrics finds each of names in a scrape, in the text format.
func parseMetrics(data []byte, names []string) ([]float64, error) {
	vs := make([]float64, len(names))
	for i, name := range names {
		found := false
		for line := range bytes.Lines(data) {
			rest, ok := bytes.CutPrefix(line, []byte(name+" "))
			if !ok {
				continue
			}
			v, err := strconv.ParseFloat(string(bytes.TrimSpace(rest)), 64)
			if err != nil {
				return nil, fmt.Errorf("metric %s: %w", name, err)
			}
			vs[i], found = v, true
			break
		}
		if !found {
			return nil, fmt.Errorf("metric %s not found", name)
		}
	}
	return vs, nil
}

// flushes is what a file-store server has flushed so far (its /metrics):
// how many group commits, their time, and the callers they served.
type flushes struct{ count, seconds, callers float64 }

func readFlushes(ctx context.Context, admin string) (flushes, error) {
	data, err := scrape(ctx, http.DefaultClient, admin)
	if err != nil {
		return flushes{}, err
	}
	return parseFlushes(data)
}

// parseFlushes reads flushes out of a scrape.
func parseFlushes(data []byte) (flushes, error) {
	v, err := parseMetrics(data, []string{
		"taskhoster_flush_duration_seconds_count", "taskhoster_flush_duration_seconds_sum", "taskhoster_flush_callers_sum"})
	if err != nil {
		return flushes{}, err
	}
	return flushes{count: v[0], seconds: v[1], callers: v[2]}, nil
}

// since is the mean flush in milliseconds, and the callers each served,
// from f to later; zero when none ran (--sync none flushes nothing).
func (f flushes) since(later flushes) (ms, callers float64) {
	n := later.count - f.count
	if n <= 0 {
		return 0, 0
	}
	return (later.seconds - f.seconds) / n * 1000, (later.callers - f.callers) / n
}

// selfCPU is the CPU time this process (the bench's clients) has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuMeter measures the CPU time a server process (pid, 0 for none) and
// the bench itself use between start and stop, per task.
type cpuMeter struct {
	pid              int
	server0, client0 time.Duration
}

func startCPU(pid int) cpuMeter {
	m := cpuMeter{pid: pid, client0: selfCPU()}
	if pid != 0 {
		m.server0, _ = ProcessCPU(pid)
	}
	return m
}

// perTask is the server's and the clients' CPU milliseconds per task since
// start (server 0 when unknown).
func (m cpuMeter) perTask(n int) (server, client float64) {
	if n == 0 {
		return 0, 0
	}
	client = ms(selfCPU()-m.client0) / float64(n)
	if m.pid != 0 {
		if s, err := ProcessCPU(m.pid); err == nil {
			server = ms(s-m.server0) / float64(n)
		}
	}
	return server, client
}
