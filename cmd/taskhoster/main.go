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
  taskhoster bench [flags]         measure throughput, latency, start-up, memory (see bench -h)

As a client (each takes --server URL, --host NAME, --token T, or
TASKHOSTER_SERVER, TASKHOSTER_HOST, TASKHOSTER_TOKEN):
  taskhoster post QUEUE [ITEM] [--delay S | --not-before MS] [--priority N] [--key K]
                                   post ITEM (JSON; stdin when - or absent), print the id;
                                   --key K posts once per key (an earlier task's id after)
  taskhoster post QUEUE --batch    post one item per line of stdin, print the ids
  taskhoster status QUEUE ID       print the task's status view as JSON
  taskhoster watch QUEUE ID        print each status view as a JSON line until it ends
  taskhoster work QUEUE --exec CMD [--concurrency N] [--query JSON] [--worker NAME]
                  [--on-error release|fail|result] [--once]
                                   run CMD (sh -c) per task until interrupted: item on
                                   stdin, result on stdout; a failing CMD gives the task back
  taskhoster release QUEUE ID [--delay S] [--reason JSON] [--worker NAME]
                                   give a leased task back to the queue
  taskhoster fail QUEUE ID [--reason JSON] [--worker NAME]
                                   fail a task for good (error "failed")

Operating a queue (the queue's "manage" access; cancel also for the poster):
  taskhoster tasks QUEUE [--status S] [--newest] [--limit N] [--after C] [--query JSON] [--all]
                                   print a page of tasks as JSON lines; "next: C" on stderr
  taskhoster cancel QUEUE ID       fail a pending or processing task (error "cancelled")
  taskhoster retry QUEUE ID        put a failed task back to pending
  taskhoster purge QUEUE --status failed|finished
                                   delete every task of that status, print how many
  taskhoster pause QUEUE           claims wait until resume (posts are still taken)
  taskhoster resume QUEUE          end a pause

  taskhoster logs pull|serve       mirror the event log locally and browse it (see logs -h)

Each command's -h lists its flags and their environment variables,
TASKHOSTER_<FLAG> (upper case, dashes as underscores); a flag wins.
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
	case "bench":
		return benchCmd(rest, stdout, stderr)
	case "post":
		return post(rest, os.Stdin, stdout, stderr)
	case "status":
		return status(rest, stdout, stderr)
	case "watch":
		return watch(rest, stdout, stderr)
	case "work":
		return work(rest, stderr)
	case "release":
		return release(rest, stdout, stderr)
	case "fail":
		return failCmd(rest, stdout, stderr)
	case "cancel":
		return cancelCmd(rest, stdout, stderr)
	case "retry":
		return retryCmd(rest, stderr)
	case "purge":
		return purgeCmd(rest, stdout, stderr)
	case "pause":
		return pauseCmd(rest, stderr, true)
	case "resume":
		return pauseCmd(rest, stderr, false)
	case "tasks":
		return tasksCmd(rest, stdout, stderr)
	case "logs":
		return logsCmd(rest, stdout, stderr)
	case "--version", "-version", "version":
		fmt.Fprintln(stdout, versionLine())
		return 0
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "taskhoster: unknown command %q\n\n%s", cmd, usage)
	return 2
}
