// Command taskhoster serves durable task queues from a hosts folder, checks
// such a folder, and (as a client) posts, reads and works tasks.
package main

import (
	"fmt"
	"io"
	"os"
)

const usage = `taskhoster: durable task queues from a folder.

Usage:
  taskhoster serve [flags]         serve the hosts folder (see serve -h)
  taskhoster check --hosts DIR     validate a hosts folder; non-zero exit on any error
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches a subcommand and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		return serve(rest, stderr)
	case "check":
		return check(rest, stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "taskhoster: unknown command %q\n\n%s", cmd, usage)
	return 2
}
