package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/taskhoster/taskhoster/adapters/folderconfig"
	"github.com/taskhoster/taskhoster/adapters/wsapi"
	"github.com/taskhoster/taskhoster/app"
	"github.com/taskhoster/taskhoster/cmd/taskhoster/server"
)

const serveSynopsis = `serve [flags]

Serves the hosts folder: each folder in it is a host, named for the Host
header its requests carry (NAME.localhost reaches NAME from this machine),
with its queues (taskhoster-queues/*.json) and users
(taskhoster-users/*.json). Edits to the folder take effect within a second.
The API listens on --addr; /metrics, /healthz and /readyz on --admin-addr.

Runs until SIGINT or SIGTERM, then finishes the requests in flight and
exits 0. Logs go to stderr: lines for a person on a terminal, JSON lines
otherwise (--log-format). One line per request is logged at --log-level
debug only; it costs throughput at thousands of tasks a second.`

func serve(args []string, stderr io.Writer) int {
	fs := newFlags("serve", serveSynopsis, stderr)
	var cfg server.Config
	fs.StringVar(&cfg.Hosts, "hosts", "./Taskhoster", "the hosts folder")
	fs.StringVar(&cfg.Items, "items", "./var/taskhoster-items", "the folder of task files")
	fs.StringVar(&cfg.Logs, "logs", "./var/taskhoster-logs", "the folder of the event log")
	fs.StringVar(&cfg.Addr, "addr", ":8080", "the API listener")
	fs.StringVar(&cfg.AdminAddr, "admin-addr", "127.0.0.1:9090", "the admin listener: /metrics, /healthz, /readyz")
	fs.StringVar(&cfg.Sync, "sync", "always", "always: fsync before acknowledging; none: never fsync")
	fs.StringVar(&cfg.Store, "store", "files", "where tasks live: files (in --items) or postgres (at --database-url)")
	// No default: parse fills it from TASKHOSTER_DATABASE_URL as it does
	// every flag. A default from the environment would be printed, password
	// and all, by -h and by the help a mistyped flag brings.
	fs.StringVar(&cfg.DatabaseURL, "database-url", "", "the PostgreSQL database of --store postgres (default $TASKHOSTER_DATABASE_URL)")
	fs.DurationVar(&cfg.Sweep, "sweep", time.Second, "how often the sweep runs (10ms or more)")
	fs.IntVar(&cfg.LogDays, "log-days", 21, "days of event log to keep")
	fs.DurationVar(&cfg.WSPing, "ws-ping", wsapi.DefaultPingInterval, "how often sockets are pinged (100ms or more); a peer silent for twice this is dropped")
	fs.IntVar(&cfg.MaxConns, "max-conns", server.DefaultMaxConns, "open connections the API listener accepts at once")
	fs.IntVar(&cfg.MaxSocketsPerHost, "max-sockets", wsapi.DefaultMaxSocketsPerHost, "open worker and watch sockets per host")
	fs.IntVar(&cfg.MaxWaiting, "max-waiting", app.DefaultMaxWaiting, "claims waiting for work at once, over HTTP and sockets")
	logLevel := fs.String("log-level", "info", "the least important lines logged: debug (adds a line per request), info, warn or error")
	logFormat := fs.String("log-format", "auto", "console (for a person), json (a line of JSON each), or auto: console on a terminal, else json")
	if err := parse(fs, args); err != nil {
		return flagError(fs, stderr, err)
	}
	if fs.NArg() > 0 {
		return badUsage(fs, stderr, "unexpected argument %q", fs.Arg(0))
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(stderr, "taskhoster serve:", err)
		return 2
	}
	logger, err := newLogger(*logLevel, *logFormat, os.Stderr)
	if err != nil {
		fmt.Fprintln(stderr, "taskhoster serve:", err)
		return 2
	}
	defer func() { _ = logger.Sync() }()
	keepHeapHeadroom(heapHeadroom)

	// A start that fails leaves no folder behind that it made itself:
	// neither the folders nor the parents made with them (./var of the
	// defaults), which are removed only when empty.
	dirs := []string{cfg.Logs}
	if cfg.Store != "postgres" {
		dirs = []string{cfg.Items, cfg.Logs}
	}
	made, parents := missing(dirs...), missingParents(dirs...)
	failed := func(err error) int {
		fmt.Fprintln(stderr, "taskhoster serve:", server.Cause(err))
		for _, dir := range made {
			removeIfUnused(dir)
		}
		for _, dir := range parents {
			_ = os.Remove(dir) // only if empty
		}
		return 1
	}
	graph := server.New(cfg, logger)
	if err := graph.Err(); err != nil {
		return failed(err)
	}
	startCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Catch the signals before the listeners open: a SIGTERM that comes
	// while the last start hooks run (clients are served by then) waits for
	// Start and stops the server cleanly, instead of killing it.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	if err := graph.Start(startCtx); err != nil {
		return failed(err)
	}
	got := <-sig
	logger.Info("shutting down", zap.String("signal", got.String()))
	stopCtx, cancelStop := context.WithTimeout(context.Background(), time.Minute)
	defer cancelStop()
	if err := graph.Stop(stopCtx); err != nil {
		fmt.Fprintln(stderr, "taskhoster serve: shutdown:", err)
		return 1
	}
	return 0
}

const checkSynopsis = `check [--hosts DIR]

Checks every host, queue and user file of the hosts folder as serve would
read it, and prints each problem on a line, "error: " or "warning: ", with
the file and the JSON path; "ok" when there is no error. Exits 1 on any
error (serve would not serve that file), else 0.`

func check(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("check", checkSynopsis, stderr)
	hosts := fs.String("hosts", "./Taskhoster", "the hosts folder to check")
	if err := parse(fs, args); err != nil {
		return flagError(fs, stderr, err)
	}
	if fs.NArg() > 0 {
		return badUsage(fs, stderr, "unexpected argument %q", fs.Arg(0))
	}
	if _, err := os.Stat(*hosts); err != nil {
		fmt.Fprintln(stderr, "taskhoster check:", err)
		return 1
	}
	failed := false
	for _, p := range folderconfig.Check(*hosts) {
		level := "error"
		if p.Warning {
			level = "warning"
		} else {
			failed = true
		}
		fmt.Fprintf(stdout, "%s: %s\n", level, p)
	}
	if failed {
		return 1
	}
	fmt.Fprintln(stdout, "ok")
	return 0
}

// newLogger logs to out from level on, as format says: "console", lines
// for a person (time, level, message, then the fields), "json", a JSON
// object a line, or "auto", console when out is a terminal and JSON
// otherwise (a pipe, a file, journald: tests and the bench read the JSON
// "listening" line). A stack trace comes only with a panic: an expected
// problem (a bad queue file, a taken port) is one line naming it.
func newLogger(level, format string, out *os.File) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil || lvl < zapcore.DebugLevel || lvl > zapcore.ErrorLevel {
		return nil, fmt.Errorf("--log-level must be debug, info, warn or error, not %q", level)
	}
	terminal := isTerminal(out)
	if format == "auto" {
		format = "json"
		if terminal {
			format = "console"
		}
	}
	enc := zap.NewProductionEncoderConfig()
	enc.TimeKey = "time"
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	opts := []zap.Option{zap.AddStacktrace(zapcore.DPanicLevel), zap.ErrorOutput(zapcore.Lock(os.Stderr))}
	var encoder zapcore.Encoder
	switch format {
	case "json":
		encoder = zapcore.NewJSONEncoder(enc)
		opts = append(opts, zap.AddCaller())
	case "console":
		// The level as a word, coloured too on a terminal; no caller: a
		// person reads the message and its fields.
		enc.EncodeLevel = zapcore.CapitalLevelEncoder
		if terminal {
			enc.EncodeLevel = zapcore.CapitalColorLevelEncoder
		}
		encoder = zapcore.NewConsoleEncoder(enc)
	default:
		return nil, fmt.Errorf("--log-format must be auto, console or json, not %q", format)
	}
	// As zap's production logger: of the lines with one message, the first
	// 100 a second and then every 100th, so a flood (a host of bad files,
	// a burst of requests at debug) cannot fill the disc or stall the server.
	core := zapcore.NewSamplerWithOptions(zapcore.NewCore(encoder, zapcore.Lock(out), lvl), time.Second, 100, 100)
	return zap.New(core, opts...), nil
}

// isTerminal reports whether f is a terminal (a character device: a tty,
// or /dev/null, where the format does not matter).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&fs.ModeCharDevice != 0
}

// missing lists the folders of dirs that do not exist yet.
func missing(dirs ...string) []string {
	var out []string
	for _, d := range dirs {
		if _, err := os.Stat(d); errors.Is(err, fs.ErrNotExist) {
			out = append(out, d)
		}
	}
	return out
}

// missingParents lists the parent folders of dirs that do not exist yet,
// each before its own parent, so that removing them in order can empty
// each one before its parent's turn.
func missingParents(dirs ...string) []string {
	var out []string
	for _, d := range dirs {
		for p := filepath.Dir(filepath.Clean(d)); ; p = filepath.Dir(p) {
			if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) || slices.Contains(out, p) {
				break
			}
			out = append(out, p)
		}
	}
	// A deeper folder first: one dir's parents may be another's grandparents.
	slices.SortStableFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// removeIfUnused removes a folder a failed start made, unless something in
// it is more than the server's own bookkeeping (the folder lock, an empty
// journal, empty folders): a task file or a log line is never removed.
func removeIfUnused(dir string) {
	unused := true
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if rel != ".lock" && !strings.HasPrefix(rel, ".journal"+string(filepath.Separator)) {
			unused = false
			return fs.SkipAll
		}
		return nil
	})
	if unused {
		_ = os.RemoveAll(dir)
	}
}
