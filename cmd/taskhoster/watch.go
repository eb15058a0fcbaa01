package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
)

// watch prints each status view of a task as one JSON line until the task
// is finished or failed: `taskhoster watch QUEUE ID`.
func watch(args []string, stdout, stderr io.Writer) int {
	fs, conn := clientFlags("watch", "watch QUEUE ID [flags]\n\nPrints the task's status view, then again on every change, one JSON line each,\nuntil it is finished or failed.", stderr)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return flagError(fs, stderr, err)
	}
	if len(pos) != 2 {
		return badUsage(fs, stderr, "want QUEUE and ID, got %d arguments", len(pos))
	}
	views, err := conn.client().Watch(context.Background(), pos[0], pos[1])
	if err != nil {
		return fail(stderr, "watch", err)
	}
	for view, err := range views {
		if err != nil {
			return fail(stderr, "watch", err)
		}
		line, err := json.Marshal(view)
		if err != nil {
			return fail(stderr, "watch", err)
		}
		fmt.Fprintf(stdout, "%s\n", line)
	}
	return 0
}
