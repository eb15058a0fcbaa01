package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/taskhoster/taskhoster/client"
)

const postSynopsis = `post QUEUE [ITEM | -] [--delay S | --not-before MS] [--priority N] [--key K] [flags]
       post QUEUE --batch [--delay S | --not-before MS] [--priority N] [flags] < ITEMS

Posts ITEM (JSON text; from stdin when - or absent) and prints the task id.
--delay or --not-before keep the task from being claimed before that time;
--priority (-1000 to 1000, default 0) puts it ahead of (or behind) others.

--key K makes the post idempotent: a later post with the same key on the
queue, while that task is kept, makes no second task and prints the first
one's id (saying so on stderr); with a different item it is refused
(idempotency_conflict). Retry a post whose answer was lost with its key.

--batch posts one item per line of stdin (blank lines skipped; at most
1000) in one request, all or nothing, and prints the ids, one per line, in
the order of the lines. A bad item is reported as /items/N (N counting the
items from 0) and nothing is posted. A batch takes no --key.`

// post posts one item and prints its id: `taskhoster post QUEUE [ITEM]`,
// with ITEM as JSON text, or read from stdin when it is "-" or absent;
// with --batch, one item per line of stdin.
func post(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs, conn := clientFlags("post", postSynopsis, stderr)
	delay := fs.Float64("delay", 0, "claimable only this many `seconds` from now (to the millisecond)")
	notBefore := fs.Int64("not-before", 0, "claimable only from this time on, in Unix `milliseconds`")
	priority := fs.Int("priority", 0, "the task's priority, -1000 to 1000: higher is claimed first")
	key := fs.String("key", "", "an idempotency `key` (1 to 200 visible ASCII characters): the same key posts once")
	batch := fs.Bool("batch", false, "post one item per line of stdin in one request; print the ids")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return flagError(fs, stderr, err)
	}
	switch {
	case *batch && len(pos) != 1:
		return badUsage(fs, stderr, "--batch wants QUEUE alone (the items come on stdin), got %d arguments", len(pos))
	case *batch && *key != "":
		return badUsage(fs, stderr, "a batch takes no --key")
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
	if *batch {
		return postBatch(conn.client(), pos[0], stdin, stdout, stderr, opts)
	}
	if *key != "" {
		opts = append(opts, client.Key(*key))
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
	posted, err := conn.client().Submit(context.Background(), pos[0], json.RawMessage(item), opts...)
	if err != nil {
		return fail(stderr, "post", err)
	}
	fmt.Fprintln(stdout, posted.ID)
	if !posted.Created {
		fmt.Fprintf(stderr, "taskhoster post: posted before with this key: task %s is %s; nothing new was made\n",
			posted.ID, posted.Status)
	}
	return 0
}

// maxBatchLine bounds one line of a batch; the server refuses items over
// the queue's maxItemBytes (1 MiB by default) anyway.
const maxBatchLine = 16 << 20

// postBatch posts the items on the lines of stdin in one request.
func postBatch(c *client.Client, queue string, stdin io.Reader, stdout, stderr io.Writer, opts []client.PostOption) int {
	var items []json.RawMessage
	sc := bufio.NewScanner(stdin)
	sc.Buffer(make([]byte, 64<<10), maxBatchLine)
	for line := 1; sc.Scan(); line++ {
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		if !json.Valid(text) {
			return fail(stderr, "post", fmt.Errorf("line %d (item %d) is not valid JSON: %.80q", line, len(items), text))
		}
		items = append(items, json.RawMessage(bytes.Clone(text)))
	}
	if err := sc.Err(); err != nil {
		return fail(stderr, "post", fmt.Errorf("read the items from stdin: %w", err))
	}
	if len(items) == 0 {
		return fail(stderr, "post", fmt.Errorf("--batch: no items on stdin (one JSON value per line)"))
	}
	ids, err := c.PostBatch(context.Background(), queue, items, opts...)
	if err != nil {
		return fail(stderr, "post", err)
	}
	for _, id := range ids {
		fmt.Fprintln(stdout, id)
	}
	return 0
}
