package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/taskhoster/taskhoster/client"
)

const releaseSynopsis = `release QUEUE ID [--delay S] [--reason JSON] [--worker NAME] [flags]

Gives a task back as the worker holding its lease: it is pending again,
claimable after the larger of --delay and the queue's retry backoff, or
failed with error "attempts" after its last allowed attempt. --reason (any
JSON value) is kept in the task's failure field. Prints the server's answer
as JSON, such as {"accepted":true,"status":"pending"}; exits 1 when it was
not accepted (the worker does not hold the lease).`

const failSynopsis = `fail QUEUE ID [--reason JSON] [--worker NAME] [flags]

Fails a task for good: status failed, error "failed", --reason (any JSON
value) kept in its failure field. Accepted whenever the task is not yet
finished or failed, whoever holds the lease. Prints the server's answer as
JSON; exits 1 when it was not accepted (the task had already ended).`

// release runs `taskhoster release`.
func release(args []string, stdout, stderr io.Writer) int {
	return giveBack("release", releaseSynopsis, args, stdout, stderr)
}

// failCmd runs `taskhoster fail`.
func failCmd(args []string, stdout, stderr io.Writer) int {
	return giveBack("fail", failSynopsis, args, stdout, stderr)
}

// giveBack runs release or fail, which differ only in --delay.
func giveBack(name, synopsis string, args []string, stdout, stderr io.Writer) int {
	fs, conn := clientFlags(name, synopsis, stderr)
	reason := fs.String("reason", "", "the reason, as JSON text (default: none)")
	worker := fs.String("worker", "", "the lease holder's `name` (default: the user's name)")
	var delay *float64
	if name == "release" {
		delay = fs.Float64("delay", 0, "claimable again no sooner than this many `seconds` from now")
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return flagError(fs, stderr, err)
	}
	switch {
	case len(pos) != 2:
		return badUsage(fs, stderr, "want QUEUE and ID, got %d arguments", len(pos))
	case *reason != "" && !json.Valid([]byte(*reason)):
		return badUsage(fs, stderr, "--reason is not valid JSON")
	// As post's: NaN, an infinity or a count of seconds past a
	// time.Duration would convert to a negative delay, which the client
	// leaves out, releasing the task at once.
	case delay != nil && (*delay < 0 || math.IsNaN(*delay) || *delay > 31536000):
		return badUsage(fs, stderr, "--delay must be 0 to 31536000 seconds, not %v", *delay)
	}
	var why any
	if *reason != "" {
		why = json.RawMessage(*reason)
	}
	c, ctx := conn.client(), context.Background()
	var ack client.Ack
	if name == "release" {
		ack, err = c.Release(ctx, pos[0], pos[1], *worker, time.Duration(*delay*float64(time.Second)), why)
	} else {
		ack, err = c.Fail(ctx, pos[0], pos[1], *worker, why)
	}
	return printAck(name, ack, err, stdout, stderr)
}

// printAck prints the server's answer as a JSON line; exit 1 when it came
// with an error or was not accepted.
func printAck(name string, ack client.Ack, err error, stdout, stderr io.Writer) int {
	if err != nil {
		return fail(stderr, name, err)
	}
	out, err := json.Marshal(ack)
	if err != nil {
		return fail(stderr, name, err)
	}
	fmt.Fprintf(stdout, "%s\n", out)
	if !ack.Accepted {
		fmt.Fprintf(stderr, "taskhoster %s: not accepted: the task is %s\n", name, ack.Status)
		return 1
	}
	return 0
}
