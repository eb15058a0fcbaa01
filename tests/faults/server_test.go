package faults

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/taskhoster/taskhoster/tests/testbin"
)

// binary is the taskhoster binary, built once for the package.
var binary string

func TestMain(m *testing.M) { os.Exit(testbin.Main(m, raceEnabled, &binary)) }

// The one host, and the queues every client uses.
const (
	host = "faults.example.com"
	// queue is the seeds' lifecycle: no attempts bound, no backoff.
	queue = "jobs"
	// retryQueue has all of SPEC §11: a bound on attempts (so every claim
	// is durable before it is answered), a backoff, and its producers post
	// delayed and prioritised tasks that its workers give back and fail.
	retryQueue = "retry"
	// opsQueue is SPEC §12's: public manage access, so that a manager may
	// cancel, retry, pause and resume it while its producers post with
	// idempotency keys and in batches.
	opsQueue = "ops"
	// leaseSeconds is short so that stalled workers lose their leases often
	// within a run; queueSeconds is long so that nothing times out.
	leaseSeconds = 2
	queueSeconds = 3600
)

// queueRules are the settings of SPEC §11 a queue file gives, as the
// checker needs them.
type queueRules struct {
	MaxAttempts      int // 0: unlimited
	RetryBaseSeconds int64
	RetryMaxSeconds  int64
	Manage           bool // the access block grants manage (SPEC §12)
}

// minBackoff is the shortest wait a task that came back after its n-th
// claim has before it is claimable: half of b = min(max, base × 2^(n-1))
// (SPEC §11: the jitter draws from [b/2, b]), in milliseconds.
func (q queueRules) minBackoff(n int) int64 {
	if q.RetryBaseSeconds <= 0 || n < 1 {
		return 0
	}
	b := q.RetryMaxSeconds
	if n-1 < 32 && q.RetryBaseSeconds<<(n-1) < b {
		b = q.RetryBaseSeconds << (n - 1)
	}
	return b * 1000 / 2
}

// runQueues are the queues of a run and their rules. The backoff is short
// (0.5 to 2 s) so that a run drains in seconds.
var runQueues = map[string]queueRules{
	queue:      {},
	retryQueue: {MaxAttempts: 3, RetryBaseSeconds: 1, RetryMaxSeconds: 2},
	opsQueue:   {Manage: true},
}

// folders are a server's hosts, items and logs folders, kept across
// restarts, and the flags it is served with beyond the usual ones (a store
// other than the files, for one).
type folders struct {
	hosts, items, logs string
	extra              []string
}

func newFolders(t *testing.T) folders {
	t.Helper()
	// Not t.TempDir: a failed run keeps its folders for a post-mortem.
	root, err := os.MkdirTemp("", "taskhoster-faults-run-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the run's folders are kept in %s", root)
			return
		}
		_ = os.RemoveAll(root)
	})
	f := folders{hosts: filepath.Join(root, "hosts"), items: filepath.Join(root, "items"), logs: filepath.Join(root, "logs")}
	for name, rules := range runQueues {
		queueFile := filepath.Join(f.hosts, host, "taskhoster-queues", name+".json")
		if err := os.MkdirAll(filepath.Dir(queueFile), 0o755); err != nil {
			t.Fatal(err)
		}
		// Public, so that no client needs a token; items carry the
		// producer's tag so that the checker can find a post nobody
		// acknowledged.
		retry := ""
		if rules.MaxAttempts > 0 {
			retry = fmt.Sprintf(`, "maxAttempts": %d, "retryBaseSeconds": %d, "retryMaxSeconds": %d`,
				rules.MaxAttempts, rules.RetryBaseSeconds, rules.RetryMaxSeconds)
		}
		manage := ""
		if rules.Manage {
			manage = `, "manage": "public"`
		}
		content := fmt.Sprintf(`{
		"item": {"type": "object", "required": ["tag"], "properties": {"tag": {"type": "string"}}},
		"settings": {"leaseSeconds": %d, "queueSeconds": %d, "retainSeconds": 3600%s},
		"access": {"post": "public", "status": "public", "work": "public"%s}
	}`, leaseSeconds, queueSeconds, retry, manage)
		if err := os.WriteFile(queueFile, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// freePort finds a loopback port nobody listens on. Every server of a run
// listens on it, so clients keep one address across restarts.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// process is one run of `taskhoster serve`.
type process struct {
	cmd       *exec.Cmd
	exited    chan struct{} // closed when the process has exited
	listening chan struct{} // closed when the API listener is bound
	signalled bool          // we ended it; set before the signal is sent

	mu       sync.Mutex
	tail     []string       // the last lines it logged, for failure messages
	trouble  []string       // lines that mean a bug whatever the test: panics, data races
	errors   map[string]int // error-level log messages and how often each came
	bindFail bool           // it could not bind the port (a restart came too soon)
	mended   []event        // the event lines its start-up repair appended
	// clockBound is the error bound of the database's clock it started on
	// (PostgreSQL only): its stamps may be that far from true time.
	clockBound time.Duration
}

// repairedMsg is what a server logs for each event line its start-up
// repair appended (app.Service.RepairLog), with the event and the task id.
const repairedMsg = "event log repaired: appended the line a crash cut"

// clockMsg is what a server on PostgreSQL logs once it has measured the
// database's clock, with the measurement's error bound ("error", seconds).
const clockMsg = "judging time by the database's clock"

// tailLines is how much of a server's log is kept for failure messages.
const tailLines = 40

// spawn starts a server on f listening on 127.0.0.1:port. It does not wait
// for the listener; see waitListening.
func spawn(f folders, port int) (*process, error) {
	cmd := exec.Command(binary, append([]string{"serve",
		"--hosts", f.hosts, "--items", f.items, "--logs", f.logs,
		"--addr", fmt.Sprintf("127.0.0.1:%d", port), "--admin-addr", "127.0.0.1:0",
		"--sync", "always", "--sweep", "100ms",
	}, f.extra...)...)
	cmd.Env = append(os.Environ(), "GORACE=halt_on_error=1")
	pipe, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, exited: make(chan struct{}), listening: make(chan struct{}), errors: map[string]int{}}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	logDone := make(chan struct{})
	go func() { defer close(logDone); p.readLog(pipe) }()
	// Wait reads the pipe's end only after readLog has drained it.
	go func() { <-logDone; _ = cmd.Wait(); close(p.exited) }()
	return p, nil
}

// readLog follows the server's log: it notices the API listener, keeps the
// tail and picks out lines that are bugs in any case.
func (p *process) readLog(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var entry struct {
			Level, Msg, Listener, Event, ID string
			Error                           json.RawMessage // a message, or clockMsg's bound in seconds
		}
		isJSON := json.Unmarshal([]byte(line), &entry) == nil
		p.mu.Lock()
		p.tail = append(p.tail, line)
		if len(p.tail) > tailLines {
			p.tail = p.tail[len(p.tail)-tailLines:]
		}
		switch {
		case strings.Contains(line, "WARNING: DATA RACE") || strings.HasPrefix(line, "panic:") || strings.HasPrefix(line, "fatal error:"):
			p.trouble = append(p.trouble, line)
		case isJSON && (entry.Level == "error" || entry.Level == "dpanic" || entry.Level == "fatal"):
			p.errors[entry.Msg]++
		}
		var bound float64
		if isJSON && entry.Msg == clockMsg && json.Unmarshal(entry.Error, &bound) == nil {
			p.clockBound = max(p.clockBound, time.Duration(bound*float64(time.Second)))
		}
		if isJSON && entry.Msg == repairedMsg {
			p.mended = append(p.mended, event{ID: entry.ID, Event: entry.Event})
		}
		if strings.Contains(line, "address already in use") {
			p.bindFail = true
		}
		p.mu.Unlock()
		if isJSON && entry.Msg == "listening" && entry.Listener == "api" {
			close(p.listening)
		}
	}
	_, _ = io.Copy(io.Discard, r)
}

// waitListening waits until the API listens, or the process exits, or
// timeout passes.
func (p *process) waitListening(timeout time.Duration) error {
	select {
	case <-p.listening:
		return nil
	case <-p.exited:
		return fmt.Errorf("server exited before listening (%v):\n%s", p.cmd.ProcessState, p.Tail())
	case <-time.After(timeout):
		return fmt.Errorf("server did not listen within %v:\n%s", timeout, p.Tail())
	}
}

// Tail is the end of the server's log.
func (p *process) Tail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, "\n")
}

// kill ends the server with SIGKILL, as a crash or a power cut of the
// process would (the kernel keeps what it was given: see the report).
func (p *process) kill() {
	p.signalled = true
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// stop ends the server with SIGTERM and returns an error unless it exits
// cleanly within timeout.
func (p *process) stop(timeout time.Duration) error {
	p.signalled = true
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(timeout):
		p.kill()
		return fmt.Errorf("server did not stop within %v:\n%s", timeout, p.Tail())
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		return fmt.Errorf("server exited %d on SIGTERM:\n%s", code, p.Tail())
	}
	return nil
}

// diedOnItsOwn reports whether the server exited without being told to.
func (p *process) diedOnItsOwn() bool {
	select {
	case <-p.exited:
		return !p.signalled
	default:
		return false
	}
}

// start starts a server on f and port and waits until it listens. Right
// after a SIGKILL the port is free (the kernel closes the listener with the
// process), but any process's outgoing connection may since have been given
// the same number as its local port, which blocks the bind for a while: a
// failed bind is retried with a growing pause rather than failing the run.
//
// A server that failed to bind had already run its start-up repair, so what
// it mended is handed on to the one that listens.
func start(f folders, port int) (*process, error) {
	const tries = 10
	var err error
	var mended []event
	for try := range tries {
		var p *process
		if p, err = spawn(f, port); err != nil {
			return nil, err
		}
		if err = p.waitListening(60 * time.Second); err == nil {
			p.mu.Lock()
			p.mended = append(mended, p.mended...)
			p.mu.Unlock()
			return p, nil
		}
		p.kill()
		p.mu.Lock()
		retry := p.bindFail
		mended = append(mended, p.mended...)
		p.mu.Unlock()
		if !retry {
			return nil, err
		}
		time.Sleep(time.Duration(try+1) * 200 * time.Millisecond)
	}
	return nil, errors.Join(fmt.Errorf("port still taken after %d tries", tries), err)
}
