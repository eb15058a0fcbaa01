package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/taskhoster/taskhoster/client"
)

const workSynopsis = `work QUEUE --exec CMD [--concurrency N] [--query JSON] [--worker NAME]
                [--on-error release|fail|result] [--once] [flags]

Works QUEUE over the worker socket until interrupted (SIGINT or SIGTERM), or
for one task with --once. For each task it runs CMD through sh -c with the
item, one line of JSON, on stdin, and hands in CMD's stdout, parsed as JSON,
as the result. CMD also gets TASKHOSTER_TASK_ID, TASKHOSTER_QUEUE and
TASKHOSTER_ATTEMPTS. While CMD runs, the worker sends heartbeats (every
third of the lease), so a long task keeps its lease.

If CMD exits non-zero or its stdout is not JSON (exitCode 0 then), the
reason {"exitCode": N, "stderr": "<its last 4 KiB>", "stdout": "<its last
4 KiB>"} goes to the server as --on-error says:
  release  (the default) give the task back: it is retried after the
           queue's backoff, and fails with error "attempts" once the
           queue's maxAttempts are used up;
  fail     fail it for good (error "failed", the reason kept);
  result   hand in {"error": {"exitCode": N, "stderr": "..."}} as the
           result, as older versions did.
If the queue's schema refuses that, it says so and the task goes back to the
queue when its lease lapses.

One line per task on stderr: its id, the outcome (finished, released,
failed, refused, cancelled or abandoned) and how long CMD ran. A task
cancelled while CMD runs (taskhoster cancel) has CMD killed and nothing
handed in. With --once it exits 1
when it could not hand anything in (a schema refused it, the server could
not be reached, it was stopped).

On the first SIGINT or SIGTERM it stops claiming, lets running tasks finish
and exits 0; a second signal kills them (the server re-queues them).`

// outputTail is how much of a failed command's stderr and stdout the
// reason (and the error result) keeps.
const outputTail = 4 << 10

// maxStdout bounds a command's stdout held in memory; the server refuses
// results over the queue's maxItemBytes (1 MiB by default) anyway.
const maxStdout = 16 << 20

// work runs `taskhoster work`.
func work(args []string, stderr io.Writer) int {
	fs, conn := clientFlags("work", workSynopsis, stderr)
	command := fs.String("exec", "", "the `command` to run for each task, through sh -c")
	concurrency := fs.Int("concurrency", 1, "how many tasks run at once (1 to 256)")
	query := fs.String("query", "", "a JSON Schema the items must match (default: any item)")
	name := fs.String("worker", "", "the worker `name` on leases (default: the user's name)")
	once := fs.Bool("once", false, "handle one task, then exit")
	onError := fs.String("on-error", "release", "what a failed command does to its task: `release`, fail or result")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return flagError(fs, stderr, err)
	}
	switch {
	case len(pos) != 1:
		return badUsage(fs, stderr, "want one QUEUE, got %d arguments", len(pos))
	case *command == "":
		return badUsage(fs, stderr, "--exec is required")
	case *concurrency < 1 || *concurrency > 256:
		return badUsage(fs, stderr, "--concurrency must be 1 to 256, not %d", *concurrency)
	case *query != "" && !json.Valid([]byte(*query)):
		return badUsage(fs, stderr, "--query is not valid JSON")
	case *onError != "release" && *onError != "fail" && *onError != "result":
		return badUsage(fs, stderr, "--on-error must be release, fail or result, not %q", *onError)
	}

	out := &lockedWriter{w: stderr} // handlers and the worker write at once
	h := &execHandler{command: *command, onError: *onError, stderr: out}
	r := &reporter{out: out, notes: h}
	w := &client.Worker{
		Client:      conn.client(),
		Queue:       pos[0],
		Name:        *name,
		Concurrency: *concurrency,
		Handler:     h.handle,
		OnOutcome:   r.done,
		Logger: slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{
			ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey {
					return slog.Attr{} // a terminal or journald adds its own
				}
				return a
			},
		})),
	}
	if *query != "" {
		w.Query = json.RawMessage(*query)
	}
	if *once {
		w.Limit = 1
	}

	// Before the first line: once it is out, a SIGTERM drains the worker
	// rather than killing it.
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)

	where := conn.server
	if conn.host != "" {
		where += " (host " + conn.host + ")"
	}
	if *once {
		fmt.Fprintf(out, "taskhoster work: handling one task of queue %s at %s, then exiting\n", w.Queue, where)
	} else {
		fmt.Fprintf(out, "taskhoster work: working queue %s at %s, %d at a time, until interrupted "+
			"(Ctrl-C finishes the running tasks and exits; twice aborts them)\n", w.Queue, where, w.Concurrency)
	}

	ctx, abort := context.WithCancel(context.Background())
	defer abort()
	stopped := make(chan struct{})
	defer close(stopped)
	go stopOnSignals(sig, w, abort, out, stopped)

	if err := w.Run(ctx); err != nil {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintln(out, "taskhoster work: stopped; the tasks in hand go back to the queue")
			return 1
		}
		return fail(out, "work", err)
	}
	if *once && (r.failed() || r.told() == 0) {
		// A failure, or stopped before a task came: nothing handled.
		return 1
	}
	return 0
}

// stopOnSignals drains the worker on the first SIGINT or SIGTERM and
// aborts it on the second.
func stopOnSignals(sig <-chan os.Signal, w *client.Worker, abort func(), out io.Writer, stopped <-chan struct{}) {
	for n := 0; ; n++ {
		select {
		case <-stopped:
			return
		case s := <-sig:
			if n == 0 {
				fmt.Fprintf(out, "taskhoster work: %v: finishing the running tasks; again to abort them\n", s)
				w.Drain()
				continue
			}
			abort()
			return
		}
	}
}

// reporter writes one line per task, and remembers whether the server did
// not take what was handed in for any of them.
type reporter struct {
	out   io.Writer
	notes *execHandler
	mu    sync.Mutex
	bad   bool
	n     int // tasks told
}

func (r *reporter) done(o client.Outcome) {
	id := o.Task.ID
	note := r.notes.take(id)
	outcome, bad := outcomeOf(o)
	var why []string
	if note != "" {
		why = append(why, note)
	}
	var refused *client.Error
	switch {
	case errors.Is(o.Err, client.ErrCancelled):
		why = append(why, "the server cancelled it; the command was stopped and nothing handed in")
	case errors.As(o.Err, &refused) && (refused.Code == "invalid_result" || refused.Code == "invalid_failure"):
		what := map[string]string{"invalid_result": "result", "invalid_failure": "reason"}[refused.Code]
		why = append(why, fmt.Sprintf("the queue's %s schema refused the %s; the task goes back to the queue "+
			"when its lease lapses or this worker disconnects: %v", what, what, o.Err))
	case errors.Is(o.Err, context.Canceled):
		why = append(why, "the server re-queues it as this worker disconnects")
	case o.Err != nil:
		why = append(why, fmt.Sprintf("nothing handed in; the task goes back to the queue when its lease lapses: %v", o.Err))
	case !o.Ack.Accepted:
		why = append(why, fmt.Sprintf("%s not accepted: the task is %s", o.Sent, o.Ack.Status))
	case o.Sent == "release" && o.Ack.Status == "failed":
		why = append(why, `its last allowed attempt: error "attempts"`)
	}
	line := fmt.Sprintf("taskhoster work: task %s %s in %v", id, outcome, o.Took.Round(time.Millisecond))
	if len(why) > 0 {
		line += " (" + strings.Join(why, "; ") + ")"
	}
	fmt.Fprintln(r.out, line)
	r.mu.Lock()
	r.n++
	r.bad = r.bad || bad
	r.mu.Unlock()
}

// outcomeOf names how a task ended, and whether that was a failure of the
// worker (nothing handed in, or refused) rather than of the command.
func outcomeOf(o client.Outcome) (string, bool) {
	switch {
	case errors.Is(o.Err, client.ErrCancelled):
		return "cancelled", false
	case errors.Is(o.Err, context.Canceled):
		return "abandoned", true
	case o.Err != nil:
		return "refused", true
	case !o.Ack.Accepted:
		// Someone else finished or failed it first, or its lease lapsed:
		// nothing to fix here.
		return "refused", false
	case o.Sent == "release" && o.Ack.Status == "failed", o.Sent == "fail":
		return "failed", false
	case o.Sent == "release":
		return "released", false
	}
	return "finished", false
}

func (r *reporter) failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bad
}

// told is how many tasks it wrote a line for.
func (r *reporter) told() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// execHandler runs the --exec command for one task.
type execHandler struct {
	command string
	onError string // release, fail or result
	stderr  io.Writer
	notes   sync.Map // task id -> what the reporter should add to its line
}

// take returns and forgets the note on task id.
func (h *execHandler) take(id string) string {
	note, _ := h.notes.LoadAndDelete(id)
	s, _ := note.(string)
	return s
}

func (h *execHandler) handle(ctx context.Context, t *client.Task) (any, error) {
	// One line of compact JSON, newline-terminated, so `read -r item` works
	// (-r: a backslash in the item's strings stays one).
	var in bytes.Buffer
	if err := json.Compact(&in, t.Item); err != nil {
		in.Reset()
		in.Write(t.Item)
	}
	in.WriteByte('\n')

	stdout := &cappedBuffer{max: maxStdout}
	outTail, errTail := &tailBuffer{max: outputTail}, &tailBuffer{max: outputTail}
	cmd := exec.CommandContext(ctx, "sh", "-c", h.command)
	cmd.Stdin = &in
	cmd.Stdout = io.MultiWriter(stdout, outTail)
	cmd.Stderr = io.MultiWriter(errTail, h.stderr) // the operator sees it too
	cmd.Env = append(os.Environ(),
		"TASKHOSTER_TASK_ID="+t.ID, "TASKHOSTER_QUEUE="+t.Queue, "TASKHOSTER_ATTEMPTS="+strconv.Itoa(t.Attempts))
	// A child that keeps stdout open after the command exits must not hold
	// the task forever.
	cmd.WaitDelay = 5 * time.Second
	ownProcessGroup(cmd)

	err := cmd.Run()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("stopped while running the command: %w", ctx.Err())
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code := exitCode(exit)
		h.notes.Store(t.ID, fmt.Sprintf("the command exited %d", code))
		return h.onFailure(code, errTail, outTail)
	case err != nil:
		// sh itself could not run: a fault of this machine, not of the
		// task, so hand in nothing and let the task be retried.
		return nil, fmt.Errorf("run the command: %w", err)
	case stdout.over || !json.Valid(stdout.Bytes()):
		h.notes.Store(t.ID, "the command's stdout is not JSON")
		return h.onFailure(0, errTail, outTail)
	}
	return json.RawMessage(bytes.TrimSpace(stdout.Bytes())), nil
}

// commandFailure is the reason given with a failed command's task.
type commandFailure struct {
	ExitCode int    `json:"exitCode"`
	Stderr   string `json:"stderr"`
	Stdout   string `json:"stdout"`
}

// onFailure is what the handler returns for a failed command, as
// --on-error says.
func (h *execHandler) onFailure(code int, stderr, stdout *tailBuffer) (any, error) {
	reason := commandFailure{ExitCode: code, Stderr: stderr.String(), Stdout: stdout.String()}
	switch h.onError {
	case "fail":
		return nil, client.Failure{Reason: reason}
	case "result":
		// The in-band result of older versions, exactly: no stdout.
		type failure struct {
			ExitCode int    `json:"exitCode"`
			Stderr   string `json:"stderr"`
		}
		return map[string]failure{"error": {ExitCode: code, Stderr: reason.Stderr}}, nil
	}
	return nil, client.Release{Reason: reason}
}

// cappedBuffer keeps the first max bytes written and notes any more. It
// never fails a write, so the command is not killed by a broken pipe.
type cappedBuffer struct {
	bytes.Buffer
	max  int
	over bool
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); len(p) > room {
		b.over = true
		b.Buffer.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return b.Buffer.Write(p)
}

// tailBuffer keeps the last max bytes written.
type tailBuffer struct {
	buf []byte
	max int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.buf = append(b.buf, p...)
	if extra := len(b.buf) - b.max; extra > 0 {
		b.buf = append(b.buf[:0], b.buf[extra:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string { return string(bytes.ToValidUTF8(b.buf, []byte("�"))) }

// lockedWriter serialises writes from concurrent tasks, so lines do not
// interleave mid-write.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
