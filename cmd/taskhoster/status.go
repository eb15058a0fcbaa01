package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
)

// status prints a task's status view: `taskhoster status QUEUE ID`.
func status(args []string, stdout, stderr io.Writer) int {
	fs, conn := clientFlags("status", "status QUEUE ID [flags]\n\nPrints the task's status view as JSON.", stderr)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return flagError(fs, stderr, err)
	}
	if len(pos) != 2 {
		return badUsage(fs, stderr, "want QUEUE and ID, got %d arguments", len(pos))
	}
	view, err := conn.client().Status(context.Background(), pos[0], pos[1])
	if err != nil {
		return fail(stderr, "status", err)
	}
	out, err := json.MarshalIndent(view, "", "  ")
	if err != nil {
		return fail(stderr, "status", err)
	}
	fmt.Fprintf(stdout, "%s\n", out)
	return 0
}
