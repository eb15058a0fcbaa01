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

const postSynopsis = `post QUEUE [ITEM | -] [--delay S | --not-before MS] [--priority N] [flags]

Posts ITEM (JSON text; from stdin when - or absent) and prints the task id.
--delay or --not-before keep the task from being claimed before that time;
--priority (-1000 to 1000, default 0) puts it ahead of (or behind) others.`

// post posts one item and prints its id: `taskhoster post QUEUE [ITEM]`,
// with ITEM as JSON text, or read from stdin when it is "-" or absent.
func post(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs, conn := clientFlags("post", postSynopsis, stderr)
	delay := fs.Float64("delay", 0, "claimable only this many `seconds` from now (to the millisecond)")
	notBefore := fs.Int64("not-before", 0, "claimable only from this time on, in Unix `milliseconds`")
	priority := fs.Int("priority", 0, "the task's priority, -1000 to 1000: higher is claimed first")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return flagError(fs, stderr, err)
	}
	switch {
	case len(pos) < 1 || len(pos) > 2:
		return badUsage(fs, stderr, "want QUEUE and at most one ITEM, got %d arguments", len(pos))
	case *delay != 0 && *notBefore != 0:
		return badUsage(fs, stderr, "give --delay or --not-before, not both")
	case *delay < 0 || math.IsNaN(*delay) || *delay > 31536000:
		return badUsage(fs, stderr, "--delay must be 0 to 31536000 seconds, not %v", *delay)
	}
	var opts []client.PostOption
	if *delay > 0 {
		opts = append(opts, client.Delay(time.Duration(*delay*float64(time.Second))))
	}
	if *notBefore != 0 {
		opts = append(opts, client.NotBefore(time.UnixMilli(*notBefore)))
	}
	if *priority != 0 {
		opts = append(opts, client.Priority(*priority))
	}
	var item []byte
	if len(pos) == 2 && pos[1] != "-" {
		item = []byte(pos[1])
	} else if item, err = io.ReadAll(stdin); err != nil {
		return fail(stderr, "post", fmt.Errorf("read the item from stdin: %w", err))
	}
	if !json.Valid(item) {
		return fail(stderr, "post", fmt.Errorf("the item is not valid JSON: %.80q", item))
	}
	id, err := conn.client().Post(context.Background(), pos[0], json.RawMessage(item), opts...)
	if err != nil {
		return fail(stderr, "post", err)
	}
	fmt.Fprintln(stdout, id)
	return 0
}
