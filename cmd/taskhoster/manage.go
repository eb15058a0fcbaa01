package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/taskhoster/taskhoster/client"
)

// The commands that operate a queue (SPEC §12). Except for cancel by the
// task's poster, they need the queue's "manage" access.

const cancelSynopsis = `cancel QUEUE ID [flags]

Cancels a task: a pending or processing task is failed with error
"cancelled", and a worker running it is told to stop. Prints the server's
answer as JSON, {"accepted":true,"status":"failed"}; for a task that had
already ended it prints {"accepted":false,"status":"finished"} (or
"failed") and exits 1. Needs manage access, or post access for the user who
posted the task.`

const retrySynopsis = `retry QUEUE ID [flags]

Puts a failed task (a dead letter, a timeout, a cancel) back to pending with
a fresh attempts budget, its item unchanged. Prints nothing; a task that is
not failed is refused (not_failed, exit 1). Needs manage access.`

const pauseSynopsis = `pause QUEUE [flags]

Pauses the queue: posts are still taken, but claims wait (or find nothing
at the end of their wait) until resume. The pause survives restarts.
Prints nothing. Needs manage access.`

const resumeSynopsis = `resume QUEUE [flags]

Ends a pause of the queue; waiting claims get their tasks. Prints nothing.
Needs manage access.`

const purgeSynopsis = `purge QUEUE --status failed|finished [flags]

Deletes every task of the queue in that status now and prints how many.
Needs manage access.`

const tasksSynopsis = `tasks QUEUE [--status S] [--newest] [--limit N] [--after C] [--query JSON] [--all] [flags]

Lists the queue's tasks in status S (pending, processing, finished or
failed; default pending), oldest first (--newest: newest first), at most N
(1 to 1000; default 100), from cursor C on, whose item matches the JSON
Schema --query. Prints one JSON line per task on stdout (its status view
with "item" and "postedBy"). When there are more, the last line on stderr
is "next: CURSOR": pass it as --after for the next page. --all reads every
page. Needs manage access.`

// cancelCmd runs `taskhoster cancel QUEUE ID`.
func cancelCmd(args []string, stdout, stderr io.Writer) int {
	fs, conn := clientFlags("cancel", cancelSynopsis, stderr)
	pos, code := positional(fs, args, stderr, "QUEUE", "ID")
	if pos == nil {
		return code
	}
	ack, err := conn.client().Cancel(context.Background(), pos[0], pos[1])
	return printAck("cancel", ack, err, stdout, stderr)
}

// retryCmd runs `taskhoster retry QUEUE ID`.
func retryCmd(args []string, stderr io.Writer) int {
	fs, conn := clientFlags("retry", retrySynopsis, stderr)
	pos, code := positional(fs, args, stderr, "QUEUE", "ID")
	if pos == nil {
		return code
	}
	return done(stderr, "retry", conn.client().Retry(context.Background(), pos[0], pos[1]))
}

// pauseCmd runs `taskhoster pause QUEUE` and, with paused false,
// `taskhoster resume QUEUE`.
func pauseCmd(args []string, stderr io.Writer, paused bool) int {
	name, synopsis := "pause", pauseSynopsis
	if !paused {
		name, synopsis = "resume", resumeSynopsis
	}
	fs, conn := clientFlags(name, synopsis, stderr)
	pos, code := positional(fs, args, stderr, "QUEUE")
	if pos == nil {
		return code
	}
	c, ctx := conn.client(), context.Background()
	if paused {
		return done(stderr, name, c.Pause(ctx, pos[0]))
	}
	return done(stderr, name, c.Resume(ctx, pos[0]))
}

// purgeCmd runs `taskhoster purge QUEUE --status failed|finished`.
func purgeCmd(args []string, stdout, stderr io.Writer) int {
	fs, conn := clientFlags("purge", purgeSynopsis, stderr)
	status := fs.String("status", "", "the `status` of the tasks to delete: failed or finished")
	pos, code := positional(fs, args, stderr, "QUEUE")
	if pos == nil {
		return code
	}
	if *status != "failed" && *status != "finished" {
		return badUsage(fs, stderr, "--status must be failed or finished, not %q", *status)
	}
	n, err := conn.client().Purge(context.Background(), pos[0], *status)
	if err != nil {
		return fail(stderr, "purge", err)
	}
	fmt.Fprintln(stdout, n)
	return 0
}

// tasksCmd runs `taskhoster tasks QUEUE`.
func tasksCmd(args []string, stdout, stderr io.Writer) int {
	fs, conn := clientFlags("tasks", tasksSynopsis, stderr)
	status := fs.String("status", "pending", "list the tasks in this `status`: pending, processing, finished or failed")
	newest := fs.Bool("newest", false, "newest first (default: oldest first)")
	limit := fs.Int("limit", 0, "at most `N` tasks a page, 1 to 1000 (default: the server's, 100)")
	after := fs.String("after", "", "start after this `cursor`, printed as \"next: CURSOR\" by the page before")
	query := fs.String("query", "", "a JSON Schema the item must match")
	all := fs.Bool("all", false, "read every page, not just the first")
	pos, code := positional(fs, args, stderr, "QUEUE")
	if pos == nil {
		return code
	}
	switch {
	case *limit < 0 || *limit > 1000:
		return badUsage(fs, stderr, "--limit must be 1 to 1000, not %d", *limit)
	case *query != "" && !json.Valid([]byte(*query)):
		return badUsage(fs, stderr, "--query is not valid JSON")
	}
	q := client.TaskQuery{Status: *status, Newest: *newest, Limit: *limit, After: *after}
	if *query != "" {
		q.Query = json.RawMessage(*query)
	}
	c := conn.client()
	for {
		page, err := c.Tasks(context.Background(), pos[0], q)
		if err != nil {
			return fail(stderr, "tasks", err)
		}
		for _, t := range page.Tasks {
			line, err := json.Marshal(t)
			if err != nil {
				return fail(stderr, "tasks", err)
			}
			fmt.Fprintf(stdout, "%s\n", line)
		}
		switch {
		case page.Next == "":
			return 0
		case !*all:
			fmt.Fprintf(stderr, "next: %s\n", page.Next)
			return 0
		}
		q.After = page.Next
	}
}

// positional parses args and wants exactly the positional arguments named.
// On a bad command line it returns nil and the exit code.
func positional(fs *flag.FlagSet, args []string, stderr io.Writer, names ...string) ([]string, int) {
	pos, err := parseArgs(fs, args)
	if err != nil {
		return nil, flagError(fs, stderr, err)
	}
	if len(pos) != len(names) {
		return nil, badUsage(fs, stderr, "want %s, got %d arguments", strings.Join(names, " and "), len(pos))
	}
	return pos, 0
}

// done is the exit code of a command that prints nothing on success.
func done(stderr io.Writer, name string, err error) int {
	if err != nil {
		return fail(stderr, name, err)
	}
	return 0
}
