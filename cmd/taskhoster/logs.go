package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/taskhoster/taskhoster/adapters/logclient"
	"github.com/taskhoster/taskhoster/adapters/logsweb"
	"github.com/taskhoster/taskhoster/adapters/sqlitelogs"
	"github.com/taskhoster/taskhoster/app/logpull"
	"github.com/taskhoster/taskhoster/client"
	"github.com/taskhoster/taskhoster/domain/tasklog"
)

// The mirror's adapters fill the pull's ports and the browser's.
var (
	_ logpull.Source       = (*logclient.Client)(nil)
	_ logpull.LineStore    = (*sqlitelogs.Store)(nil)
	_ logpull.PayloadStore = (*sqlitelogs.Store)(nil)
	_ logsweb.Store        = (*sqlitelogs.Store)(nil)
)

const logsUsage = `Task Logs: a local mirror of a server's event log, and a browser over it.

Usage:
  taskhoster logs pull --server URL [--host NAME] --token T --store DIR [--follow] [--every 5s]
                        mirror new event lines and archived payloads into DIR/tasklogs.db
  taskhoster logs serve --store DIR [--addr 127.0.0.1:7070]
                        browse the mirror in a web page

`

const pullSynopsis = `logs pull --server URL [--host NAME] --token T --store DIR [--follow] [--every 5s] [flags]

Mirrors the event lines (and archived payloads) the user's logs access
reads from the server into DIR/` + sqlitelogs.File + `, from where the last pull
stopped, and prints what it added. --follow pulls again every --every
until interrupted (SIGINT or SIGTERM).`

const logsServeSynopsis = `logs serve --store DIR [--addr 127.0.0.1:7070]

Serves a web page over the mirror logs pull fills, read-only, on this
machine only unless --addr says otherwise (TASKHOSTER_ADDR, the server's
address, is not read). Runs until SIGINT or SIGTERM.`

// logsCmd runs `taskhoster logs pull|serve`.
func logsCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, logsUsage)
		return 2
	}
	switch args[0] {
	case "pull":
		return logsPull(args[1:], stdout, stderr)
	case "serve":
		return logsServe(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, logsUsage)
		logsPull([]string{"-h"}, stdout, stdout)
		fmt.Fprintln(stdout)
		logsServe([]string{"-h"}, stdout, stdout)
		return 0
	}
	fmt.Fprintf(stderr, "taskhoster logs: unknown command %q\n\n%s", args[0], logsUsage)
	return 2
}

// logsFlags parses a logs subcommand's flags (no positional arguments) and
// returns the exit code to end with, or -1 to go on.
func logsFlags(fs *flag.FlagSet, args []string, stderr io.Writer) int {
	if err := parse(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		fs.Usage()
		return 2
	}
	return -1
}

// logsPull runs `taskhoster logs pull`.
func logsPull(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("logs pull", pullSynopsis, stderr)
	server := fs.String("server", "http://127.0.0.1:8080", "the server's `URL`")
	host := fs.String("host", "", "the Host header to send, which picks the host folder (default: the URL's host)")
	token := fs.String("token", "", "the bearer `token` of a user with logs access")
	store := fs.String("store", "", "the mirror's `DIR` (required); the file is DIR/"+sqlitelogs.File)
	follow := fs.Bool("follow", false, "keep pulling until interrupted")
	every := fs.Duration("every", 5*time.Second, "with --follow, how often to pull")
	batch := fs.Int("batch", logpull.DefaultBatch, "lines committed per transaction")
	limit := fs.Int("limit", 0, "stop after reading this many lines; the next pull goes on (0: no limit)")
	if code := logsFlags(fs, args, stderr); code >= 0 {
		return code
	}
	switch {
	case *store == "":
		fmt.Fprintln(stderr, "taskhoster logs pull: --store DIR is required")
		return 2
	case *token == "":
		fmt.Fprintln(stderr, "taskhoster logs pull: --token is required: the log API is for users with logs access")
		return 2
	case *every <= 0 || *batch < 1 || *limit < 0:
		fmt.Fprintln(stderr, "taskhoster logs pull: --every and --batch must be positive, --limit not negative")
		return 2
	}

	// A stalled server should not hang a pull; a big day file may still
	// take long to stream, so only the wait for an answer is bounded.
	transport := client.NewTransport() // NAME.localhost is this machine
	transport.ResponseHeaderTimeout = time.Minute
	src, err := logclient.New(*server, *host, *token, &http.Client{Transport: transport})
	if err != nil {
		fmt.Fprintf(stderr, "taskhoster logs pull: %v\n", err)
		return 2
	}
	st, err := sqlitelogs.Open(*store)
	if err != nil {
		fmt.Fprintf(stderr, "taskhoster logs pull: %v\n", err)
		return 1
	}
	defer st.Close()

	source := tasklog.CanonicalHost(src.Host())
	p := logpull.New(src, st, st, logpull.Options{
		Source: source, Batch: *batch, Limit: *limit,
		Warn: func(msg string) { fmt.Fprintf(stderr, "taskhoster logs pull: %s\n", msg) },
	})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	if *follow {
		total := p.Follow(ctx, *every, func(sum logpull.Summary, err error) {
			if err != nil {
				fmt.Fprintf(stderr, "taskhoster logs pull: %v (trying again in %v)\n", err, *every)
			}
			if sum.Lines > 0 || sum.Payloads > 0 || sum.GoneDays > 0 {
				fmt.Fprintf(stdout, "%s pulled from %s: %s\n", time.Now().Format(time.TimeOnly), source, sum)
			}
		})
		fmt.Fprintf(stdout, "pulled from %s in all: %s\n", source, total)
		return 0
	}
	sum, err := p.Pull(ctx)
	if err == nil || sum != (logpull.Summary{}) {
		// After a failure, what was pulled before it is kept: say what.
		fmt.Fprintf(stdout, "pulled from %s: %s\n", source, sum)
	}
	if err != nil {
		if ctx.Err() != nil {
			err = errors.New("interrupted; what was pulled is kept, and the next pull goes on from there")
		}
		fmt.Fprintf(stderr, "taskhoster logs pull: %v\n", err)
		return 1
	}
	return 0
}

// defaultLogsAddr is where logs serve listens unless told otherwise: this
// machine only, since the mirror holds whatever the tasks carried.
const defaultLogsAddr = "127.0.0.1:7070"

// logsServe runs `taskhoster logs serve` until SIGINT or SIGTERM.
func logsServe(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("logs serve", logsServeSynopsis, stderr)
	store := fs.String("store", "", "the mirror's `DIR` (required), as given to logs pull")
	addr := fs.String("addr", defaultLogsAddr, "the `address` to listen on")
	fs.Usage = func() { printHelp(fs, logsServeSynopsis, "addr") }
	if code := logsFlags(fs, args, stderr); code >= 0 {
		return code
	}
	// TASKHOSTER_ADDR is the server's own listen address (serve --addr),
	// often set in the same shell; taking it here would clash with the
	// server or open the mirror to the network. Only --addr counts.
	addrGiven := false
	fs.Visit(func(f *flag.Flag) { addrGiven = addrGiven || f.Name == "addr" })
	if !addrGiven {
		*addr = defaultLogsAddr
	}
	if *store == "" {
		fmt.Fprintln(stderr, "taskhoster logs serve: --store DIR is required")
		return 2
	}

	st, err := sqlitelogs.OpenReader(*store)
	if err != nil {
		fmt.Fprintf(stderr, "taskhoster logs serve: %v\n", err)
		return 1
	}
	defer st.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintf(stderr, "taskhoster logs serve: %v\n", err)
		return 1
	}
	pages := logsweb.New(st, func(err error) {
		fmt.Fprintf(stderr, "taskhoster logs serve: %v\n", err)
	})
	srv := &http.Server{
		Handler:           pages,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      5 * time.Minute, // a big progress.jsonl on a slow link
		IdleTimeout:       2 * time.Minute,
	}
	// The pages' live streams end at shutdown; Shutdown would wait for them.
	srv.RegisterOnShutdown(pages.Close)
	fmt.Fprintf(stdout, "Task Logs of %s on http://%s/\n", *store, ln.Addr())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		fmt.Fprintf(stderr, "taskhoster logs serve: %v\n", err)
		return 1
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		fmt.Fprintf(stderr, "taskhoster logs serve: %v\n", err)
		return 1
	}
	return 0
}
