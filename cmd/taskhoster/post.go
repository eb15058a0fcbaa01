package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
)

// post posts one item and prints its id: `taskhoster post QUEUE [ITEM]`,
// with ITEM as JSON text, or read from stdin when it is "-" or absent.
func post(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs, conn := clientFlags("post", "post QUEUE [ITEM | -] [flags]\n\nPosts ITEM (JSON text; from stdin when - or absent) and prints the task id.", stderr)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return flagError(fs, stderr, err)
	}
	if len(pos) < 1 || len(pos) > 2 {
		return badUsage(fs, stderr, "want QUEUE and at most one ITEM, got %d arguments", len(pos))
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
	id, err := conn.client().Post(context.Background(), pos[0], json.RawMessage(item))
	if err != nil {
		return fail(stderr, "post", err)
	}
	fmt.Fprintln(stdout, id)
	return 0
}
