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
	"sync"
	"syscall"
	"time"

	"github.com/taskhoster/taskhoster/client"
)

const workSynopsis = `work QUEUE --exec CMD [--concurrency N] [--query JSON] [--worker NAME] [--once] [flags]

Works QUEUE over the worker socket. For each task it runs CMD through sh -c
with the item, one line of JSON, on stdin, and hands in CMD's stdout, parsed
as JSON, as the result. If CMD exits non-zero or its stdout is not JSON, it
hands in {"error": {"exitCode": N, "stderr": "<the last 4 KiB>"}} instead
(exitCode 0: the stdout was the problem); if the queue's result schema
refuses that, it says so and the task goes back to the queue. CMD also gets
TASKHOSTER_TASK_ID, TASKHOSTER_QUEUE and TASKHOSTER_ATTEMPTS.

It runs until SIGINT or SIGTERM: it then stops claiming, lets running tasks
finish and exits 0; a second signal kills them (the server re-queues them).`

// stderrTail is how much of a failed command's stderr the error result keeps.
const stderrTail = 4 << 10

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
	}

	out := &lockedWriter{w: stderr} // handlers and the worker write at once
	r := &reporter{out: out}
	w := &client.Worker{
		Client:      conn.client(),
		Queue:       pos[0],
		Name:        *name,
		Concurrency: *concurrency,
		Handler:     execHandler{command: *command, stderr: out}.handle,
		OnDone:      r.done,
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

	ctx, abort := context.WithCancel(context.Background())
	defer abort()
	stopped := make(chan struct{})
	defer close(stopped)
	go stopOnSignals(w, abort, out, stopped)

	if err := w.Run(ctx); err != nil {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintln(out, "taskhoster work: stopped; the tasks in hand go back to the queue")
			return 1
		}
		return fail(out, "work", err)
	}
	if *once && r.failed() {
		return 1
	}
	return 0
}

// stopOnSignals drains the worker on the first SIGINT or SIGTERM and
// aborts it on the second.
func stopOnSignals(w *client.Worker, abort func(), out io.Writer, stopped <-chan struct{}) {
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
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

// reporter tells the operator about every task that did not end with an
// accepted result, and remembers whether any did not.
type reporter struct {
	out io.Writer
	mu  sync.Mutex
	bad bool
}

func (r *reporter) done(t *client.Task, accepted bool, err error) {
	var refused *client.Error
	switch {
	case errors.As(err, &refused) && refused.Code == "invalid_result":
		fail(r.out, "work", fmt.Errorf("task %s: the queue's result schema refused the result; "+
			"the task goes back to the queue when its lease lapses or this worker disconnects: %w", t.ID, err))
	case errors.Is(err, context.Canceled):
		fmt.Fprintf(r.out, "taskhoster work: task %s: abandoned; the server re-queues it as this worker disconnects\n", t.ID)
	case err != nil:
		fail(r.out, "work", fmt.Errorf("task %s: no result handed in; the task goes back to the queue when its lease lapses: %w", t.ID, err))
	case !accepted:
		fmt.Fprintf(r.out, "taskhoster work: task %s: result not accepted: the task was already finished or failed\n", t.ID)
		return
	default:
		return
	}
	r.mu.Lock()
	r.bad = true
	r.mu.Unlock()
}

func (r *reporter) failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bad
}

// execHandler runs the --exec command for one task.
type execHandler struct {
	command string
	stderr  io.Writer
}

func (h execHandler) handle(ctx context.Context, t *client.Task) (any, error) {
	// One line of compact JSON, newline-terminated, so `read item` works.
	var in bytes.Buffer
	if err := json.Compact(&in, t.Item); err != nil {
		in.Reset()
		in.Write(t.Item)
	}
	in.WriteByte('\n')

	stdout := &cappedBuffer{max: maxStdout}
	tail := &tailBuffer{max: stderrTail}
	cmd := exec.CommandContext(ctx, "sh", "-c", h.command)
	cmd.Stdin = &in
	cmd.Stdout = stdout
	cmd.Stderr = io.MultiWriter(tail, h.stderr) // the operator sees it too
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
		fmt.Fprintf(h.stderr, "taskhoster work: task %s: the command exited %d; handing in an error result\n", t.ID, code)
		return errorResult(code, tail), nil
	case err != nil:
		// sh itself could not run: a fault of this machine, not of the
		// task, so hand in nothing and let the task be retried.
		return nil, fmt.Errorf("run the command: %w", err)
	case stdout.over || !json.Valid(stdout.Bytes()):
		fmt.Fprintf(h.stderr, "taskhoster work: task %s: the command's stdout is not JSON; handing in an error result\n", t.ID)
		return errorResult(0, tail), nil
	}
	return json.RawMessage(bytes.TrimSpace(stdout.Bytes())), nil
}

// errorResult is the in-band result of a command that failed.
func errorResult(code int, stderr *tailBuffer) any {
	type failure struct {
		ExitCode int    `json:"exitCode"`
		Stderr   string `json:"stderr"`
	}
	return map[string]failure{"error": {ExitCode: code, Stderr: stderr.String()}}
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
