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

func serve(args []string, stderr io.Writer) int {
	fs := newFlags("serve", stderr)
	var cfg server.Config
	fs.StringVar(&cfg.Hosts, "hosts", "./Taskhoster", "the hosts folder")
	fs.StringVar(&cfg.Items, "items", "./var/taskhoster-items", "the folder of task files")
	fs.StringVar(&cfg.Logs, "logs", "./var/taskhoster-logs", "the folder of the event log")
	fs.StringVar(&cfg.Addr, "addr", ":8080", "the API listener")
	fs.StringVar(&cfg.AdminAddr, "admin-addr", "127.0.0.1:9090", "the admin listener: /metrics, /healthz, /readyz")
	fs.StringVar(&cfg.Sync, "sync", "always", "always: fsync before acknowledging; none: never fsync")
	fs.StringVar(&cfg.Store, "store", "files", "where tasks live: files (in --items) or postgres (at --database-url)")
	fs.StringVar(&cfg.DatabaseURL, "database-url", os.Getenv("TASKHOSTER_DATABASE_URL"), "the PostgreSQL database of --store postgres (default $TASKHOSTER_DATABASE_URL)")
	fs.DurationVar(&cfg.Sweep, "sweep", time.Second, "how often the sweep runs")
	fs.IntVar(&cfg.LogDays, "log-days", 21, "days of event log to keep")
	fs.DurationVar(&cfg.WSPing, "ws-ping", wsapi.DefaultPingInterval, "how often sockets are pinged; a peer silent for twice this is dropped")
	fs.IntVar(&cfg.MaxConns, "max-conns", server.DefaultMaxConns, "open connections the API listener accepts at once")
	fs.IntVar(&cfg.MaxSocketsPerHost, "max-sockets", wsapi.DefaultMaxSocketsPerHost, "open worker and watch sockets per host")
	fs.IntVar(&cfg.MaxWaiting, "max-waiting", app.DefaultMaxWaiting, "claims waiting for work at once, over HTTP and sockets")
	if err := parse(fs, args); err != nil {
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(stderr, "taskhoster serve:", err)
		return 2
	}
	logger, err := newLogger()
	if err != nil {
		fmt.Fprintln(stderr, "taskhoster serve: logger:", err)
		return 1
	}
	defer func() { _ = logger.Sync() }()

	// A start that fails leaves no folder behind that it made itself.
	made := missing(cfg.Logs)
	if cfg.Store != "postgres" {
		made = missing(cfg.Items, cfg.Logs)
	}
	failed := func(err error) int {
		fmt.Fprintln(stderr, "taskhoster serve:", server.Cause(err))
		for _, dir := range made {
			removeIfUnused(dir)
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

func check(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("check", stderr)
	hosts := fs.String("hosts", "./Taskhoster", "the hosts folder to check")
	if err := parse(fs, args); err != nil {
		return 2
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

// newLogger logs JSON lines, with a stack trace only for a panic: an
// expected problem (a bad queue file, a taken port) is one line naming it.
func newLogger() (*zap.Logger, error) {
	cfg := zap.NewProductionConfig()
	cfg.EncoderConfig.TimeKey = "time"
	cfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	return cfg.Build(zap.AddStacktrace(zapcore.DPanicLevel))
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
