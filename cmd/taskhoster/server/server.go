// Package server wires the adapters and the use cases into a running
// `taskhoster serve` with go.uber.org/fx: one module per adapter, each with
// lifecycle hooks that open what it needs on start and release it on stop.
// Hooks stop in the reverse order they started, so the HTTP listeners stop
// first and the items lock is released last.
package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/dig"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
	"go.uber.org/zap"

	"github.com/taskhoster/taskhoster/adapters/clock"
	"github.com/taskhoster/taskhoster/adapters/dashboard"
	"github.com/taskhoster/taskhoster/adapters/durable"
	"github.com/taskhoster/taskhoster/adapters/eventlog"
	"github.com/taskhoster/taskhoster/adapters/folderconfig"
	"github.com/taskhoster/taskhoster/adapters/fsstore"
	"github.com/taskhoster/taskhoster/adapters/httpapi"
	"github.com/taskhoster/taskhoster/adapters/httperr"
	"github.com/taskhoster/taskhoster/adapters/metrics"
	"github.com/taskhoster/taskhoster/adapters/notify"
	"github.com/taskhoster/taskhoster/adapters/pgnotify"
	"github.com/taskhoster/taskhoster/adapters/postgres"
	"github.com/taskhoster/taskhoster/adapters/schema"
	"github.com/taskhoster/taskhoster/adapters/wsapi"
	"github.com/taskhoster/taskhoster/app"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// Config is what `taskhoster serve` is told by its flags (SPEC §10).
type Config struct {
	Hosts     string // the hosts folder
	Items     string // the items (task files) folder
	Logs      string // the event log folder
	Addr      string // the API listener
	AdminAddr string // /metrics, /healthz, /readyz
	Sync      string // "always" or "none"
	// Store is where tasks live: "files" (the default; "" too) in Items,
	// or "postgres" in the database at DatabaseURL.
	Store       string
	DatabaseURL string
	Sweep       time.Duration // sweep interval
	LogDays     int           // event log retention in days
	// ShutdownGrace is how long requests in flight may take to finish.
	ShutdownGrace time.Duration
	// WSPing is how often every socket is pinged (--ws-ping, default 15 s),
	// and WSPeerTimeout how long a silent peer is kept (twice WSPing).
	WSPing, WSPeerTimeout time.Duration

	// Resource limits; zero means the default. See ARCHITECTURE.md,
	// "Resource limits".
	MaxConns          int // open connections on the API listener (--max-conns)
	MaxSocketsPerHost int // open worker and watch sockets of one host (--max-sockets)
	MaxWaiting        int // claims waiting for work, all hosts together (--max-waiting)
}

// Defaults of the limits.
const (
	DefaultMaxConns = 10_000
	// A request's body must arrive within ReadTimeout: slow senders
	// (slowloris) cannot hold a connection for ever. Headers get less.
	ReadHeaderTimeout = 10 * time.Second
	ReadTimeout       = 2 * time.Minute
	IdleTimeout       = 2 * time.Minute
	// MaxLogDays is the most --log-days takes, a century: the prune's first
	// day kept is today less that many days, and a count in the billions
	// overflows the calendar into a day after today, which would prune the
	// whole event log.
	MaxLogDays = 36500
)

// Validate checks the flags before anything is opened.
func (c Config) Validate() error {
	switch {
	case c.Sync != "always" && c.Sync != "none":
		return fmt.Errorf("--sync must be always or none, not %q", c.Sync)
	case c.Store != "" && c.Store != "files" && c.Store != "postgres":
		return fmt.Errorf("--store must be files or postgres, not %q", c.Store)
	case c.Store == "postgres" && c.DatabaseURL == "":
		return errors.New("--store postgres needs --database-url (or TASKHOSTER_DATABASE_URL)")
	case c.Sweep < MinSweep:
		return fmt.Errorf("--sweep must be %v or more", MinSweep)
	case c.LogDays <= 0 || c.LogDays > MaxLogDays:
		return fmt.Errorf("--log-days must be 1 to %d", MaxLogDays)
	case c.WSPing < 0 || c.WSPing > 0 && c.WSPing < MinWSPing:
		return fmt.Errorf("--ws-ping must be %v or more", MinWSPing)
	case c.MaxConns < 0 || c.MaxSocketsPerHost < 0 || c.MaxWaiting < 0:
		return errors.New("--max-conns, --max-sockets and --max-waiting must be positive")
	}
	return nil
}

// The shortest --sweep and --ws-ping: a sweep or a ping every microsecond
// (a typo's unit) would keep a CPU busy with nothing but them, and a ping
// that often would drop any peer slower to answer than that.
const (
	MinSweep  = 10 * time.Millisecond
	MinWSPing = 100 * time.Millisecond
)

// withDefaults fills in what the flags left at zero.
func withDefaults(cfg Config) Config {
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = 10 * time.Second
	}
	if cfg.WSPing == 0 {
		cfg.WSPing = wsapi.DefaultPingInterval
	}
	if cfg.WSPeerTimeout == 0 {
		cfg.WSPeerTimeout = 2 * cfg.WSPing
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	return cfg
}

// New builds the application graph. Start it with Start, stop it with Stop.
func New(cfg Config, logger *zap.Logger) *fx.App {
	return fx.New(Options(cfg, logger))
}

// Cause is the error that made building or starting the graph fail, without
// fx's account of the chain of constructors that led to it: what a person
// needs to fix is the missing folder or the taken port, not the wiring.
func Cause(err error) error { return dig.RootCause(err) }

// Options is the whole graph, for New and for fx.ValidateApp in tests.
func Options(cfg Config, logger *zap.Logger) fx.Option {
	cfg = withDefaults(cfg)
	return fx.Options(
		fx.Supply(cfg, logger),
		// fx's own events stay out of the log: a failure comes back from
		// New or Start, and the command prints its cause (Cause) once.
		fx.WithLogger(func() fxevent.Logger { return fxevent.NopLogger }),
		fx.StopTimeout(cfg.ShutdownGrace+20*time.Second),
		clockModule(cfg), storeModules(cfg), NotifyModule,
		ConfigModule, SchemaModule, MetricsModule, ServiceModule, SweepModule,
		WSModule, DashboardModule, HTTPModule, AdminModule,
	)
}

// storeModules are the task store, the event log and the Syncer that
// makes both durable: on files, the items folder, the log folder and the
// journal that group-commits them; on PostgreSQL, the database and the
// log folder, flushed on its own.
func storeModules(cfg Config) fx.Option {
	if cfg.Store == "postgres" {
		return fx.Options(PostgresModule, PostgresLogModule)
	}
	return fx.Options(DurableModule, StoreModule, EventLogModule)
}

// clockModule is the clock the rules judge time by: on PostgreSQL the
// database's, so that servers sharing it agree however their own clocks
// are set; on files the system's.
func clockModule(cfg Config) fx.Option {
	if cfg.Store == "postgres" {
		return PostgresClockModule
	}
	return ClockModule
}

// ClockModule provides the system clock (shifted by the test-only
// TASKHOSTER_TEST_CLOCK_SKEW when it is set: clock.SkewEnv).
var ClockModule = fx.Module("clock",
	fx.Provide(func() (ports.Clock, error) {
		skew, err := clock.SkewFromEnv()
		if skew == 0 || err != nil {
			return clock.System{}, err
		}
		return clock.Shifted{By: skew}, nil
	}),
)

// PostgresClockModule provides the database's clock (postgres.Clock): the
// local clock (shifted by TASKHOSTER_TEST_CLOCK_SKEW, a test hook) plus
// its offset from the database's, measured at start and every 5 s.
var PostgresClockModule = fx.Module("pgclock",
	fx.Provide(func(lc fx.Lifecycle, s *postgres.Store, logger *zap.Logger) (ports.Clock, error) {
		skew, err := clock.SkewFromEnv()
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := s.Clock(ctx, postgres.ClockOptions{Local: clock.Shifted{By: skew}.Now, Logger: logger.Named("pgclock")})
		if err != nil {
			return nil, err
		}
		offset, bound := c.Offset()
		logger.Info("judging time by the database's clock", zap.Duration("offset", offset), zap.Duration("error", bound))
		lc.Append(fx.StopHook(c.Close))
		return c, nil
	}),
)

// DurableModule provides the durability adapter, ports.Syncer. Under
// --sync always every write of the store and the event log is recorded in
// the journal, and a Sync is a group commit of it: one fdatasync of a few
// sequential blocks, where a syncfs would write back every task file,
// directory and inode the batch touched (ARCHITECTURE.md). Under --sync
// none Sync does nothing, and a journal a crashed run under --sync always
// left is replayed and removed at the store's Open. It is closed after the
// stores, which depend on it.
var DurableModule = fx.Module("durable",
	fx.Provide(func(lc fx.Lifecycle, cfg Config, logger *zap.Logger) (*durable.Syncer, ports.Syncer, error) {
		s, err := durable.Open(durable.Config{
			Items: cfg.Items, Logs: cfg.Logs, Record: cfg.Sync == "always", Logger: logger.Named("durable"),
		})
		if err != nil {
			return nil, nil, err
		}
		if cfg.Sync == "always" {
			logger.Info("group commit through the journal")
		}
		lc.Append(fx.StopHook(s.Close))
		return s, s, nil
	}),
	// Every flush is reported to /metrics. Metrics count the store's
	// tasks, and the store needs the journal: so the observer joins here,
	// before anything is served, rather than as an argument of Open.
	fx.Invoke(func(s *durable.Syncer, m *metrics.Metrics) { s.Observe(m) }),
	// A claim woken for a task just posted joins the post's commit
	// (durable.Syncer.Expect): one commit from post to worker, not two.
	fx.Invoke(func(s *durable.Syncer, h *notify.Hub) { h.OnWake(s.Expect, s.Unexpect) }),
	// A journal stopped by a failed flush fails /healthz, /readyz and /_health.
	fx.Invoke(func(s *durable.Syncer, r *Ready) { r.stopped = s.Err }),
)

// StoreModule opens the items folder (taking its lock) and closes it last
// but the journal. Open replays the journal, which restores task files a
// power loss cut.
var StoreModule = fx.Module("fsstore",
	fx.Provide(func(lc fx.Lifecycle, cfg Config, d *durable.Syncer, logger *zap.Logger) (*fsstore.Store, ports.TaskRepository, ports.Pauses, corruptFiles, error) {
		if err := os.MkdirAll(cfg.Items, 0o755); err != nil {
			return nil, nil, nil, nil, fmt.Errorf("items folder: %w", err)
		}
		s, err := fsstore.Open(cfg.Items, fsstore.WithLogger(logger.Named("fsstore")), fsstore.WithJournal(d.Root(durable.Items)))
		if err != nil {
			return nil, nil, nil, nil, err
		}
		lc.Append(fx.StopHook(s.Close))
		return s, s, s, s.Recovered, nil
	}),
)

// corruptFiles lists the task files the store set aside at start-up
// (fsstore.Store.Recovered); a database has none.
type corruptFiles func() []fsstore.Corrupt

// PostgresModule opens the PostgreSQL store (migrating its schema) and
// closes its connections on stop. It keeps the pauses too.
var PostgresModule = fx.Module("postgres",
	fx.Provide(func(lc fx.Lifecycle, cfg Config) (*postgres.Store, ports.TaskRepository, ports.Pauses, corruptFiles, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := postgres.Open(ctx, cfg.DatabaseURL)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		lc.Append(fx.StopHook(s.Close))
		return s, s, s, func() []fsstore.Corrupt { return nil }, nil
	}),
)

// PostgresLogModule is the event log in the PostgreSQL database
// (postgres.Log): the store writes each change's line in the change's own
// transaction (postgres.Store.WriteLines, finding the event the use case
// staged: app.StagedEvent; a batch post's lines, app.StagedEvents, in the
// batch's), so store and log never disagree and the start-up repair has
// nothing to do. The log API reads the same table. A change is durable
// once its COMMIT returns (synchronous_commit on, PostgreSQL's default),
// its line with it, so the Syncer has nothing to flush. Archived payload
// bodies are rows of the same database.
var PostgresLogModule = fx.Module("pglog",
	fx.Provide(func(s *postgres.Store) (ports.EventLog, ports.Syncer, logPruner, httpapi.LogReader) {
		s.WriteLines(app.StagedEvent)
		s.WriteBatchLines(app.StagedEvents)
		l := s.Log()
		return l, nopSyncer{}, l, l
	}),
)

// nopSyncer: nothing is left to flush once a COMMIT returned.
type nopSyncer struct{}

func (nopSyncer) Sync(ctx context.Context) error { return ctx.Err() }

// logPruner deletes the event log's days older than the kept window
// (eventlog.Log, postgres.Log).
type logPruner interface {
	Prune(ctx context.Context, now time.Time, days int) error
}

// EventLogModule opens the event log; on stop it flushes and closes it.
// Its lines go to the journal too (nowhere under --sync none).
var EventLogModule = fx.Module("eventlog",
	fx.Provide(func(lc fx.Lifecycle, cfg Config, d *durable.Syncer) (*eventlog.Log, ports.EventLog, logPruner, httpapi.LogReader, error) {
		l, err := eventlog.Open(cfg.Logs)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		l.UseJournal(d.Root(durable.Logs))
		lc.Append(fx.StopHook(func() error {
			return errors.Join(l.Sync(), l.Close())
		}))
		// Lines are served once durable: a mirror keeps what it reads.
		return l, l, l, eventlog.NewReader(cfg.Logs).Durable(l, d.Sync), nil
	}),
)

// NotifyModule provides the notifier. It hands on a wake a claim did not
// use only while the queue still has pending tasks. On files it is the
// in-process hub; on PostgreSQL the hub wrapped in pgnotify, which carries
// the news between the servers sharing the database over LISTEN/NOTIFY:
// its start hook returns once the listener LISTENs, and it stops (sending
// what is queued) before the store closes, having started after it.
// The hub is also provided on its own: it knows the claims waiting here.
var NotifyModule = fx.Module("notify",
	fx.Provide(func(repo ports.TaskRepository) *notify.Hub {
		pending := func(q domain.QueueRef) bool { return repo.Counts(q).Pending > 0 }
		// A database store answers this with one probe instead of a count.
		if p, ok := repo.(interface{ HasPending(domain.QueueRef) bool }); ok {
			pending = p.HasPending
		}
		opts := []notify.Option{notify.WithPending(pending)}
		// One that sees every claimable row says when a claim that found
		// none at all is to hand its wake on (nearly never).
		if p, ok := repo.(interface{ HandOnEmpty(domain.QueueRef) bool }); ok {
			opts = append(opts, notify.WithEmptyLook(p.HandOnEmpty))
		}
		return notify.NewHub(opts...)
	}),
	fx.Provide(func(lc fx.Lifecycle, cfg Config, hub *notify.Hub, repo ports.TaskRepository, logger *zap.Logger) ports.Notifier {
		if cfg.Store != "postgres" {
			return hub
		}
		n := pgnotify.New(hub, cfg.DatabaseURL, repo, logger.Named("pgnotify"))
		// A read of a change another server made waits until it has been
		// announced here, so a watch does not see it twice.
		if r, ok := repo.(interface{ OnRead(postgres.ReadHook) }); ok {
			r.OnRead(n.Readable)
		}
		// A pending task a transaction held and let go wakes a claim here or
		// on another server (postgres.Store.OnRelease).
		if r, ok := repo.(interface {
			OnRelease(func(domain.QueueRef, int))
		}); ok {
			r.OnRelease(n.Wake)
		}
		// Alone on the database, a server knows every change of its
		// queues: claims take their tasks from stock (postgres.Store.OnAlone).
		if r, ok := repo.(interface{ OnAlone(func() bool) }); ok {
			r.OnAlone(func() bool { return !n.Others() })
		}
		lc.Append(fx.StartStopHook(n.Start, n.Stop))
		return n
	}),
)

// ConfigModule loads the hosts folder and watches it for changes.
var ConfigModule = fx.Module("folderconfig",
	fx.Provide(func(lc fx.Lifecycle, cfg Config, logger *zap.Logger) (*folderconfig.Live, error) {
		live, err := folderconfig.New(cfg.Hosts, logger.Named("config"))
		if err != nil {
			return nil, err
		}
		lc.Append(fx.StartStopHook(live.Start, live.Stop))
		return live, nil
	}),
	fx.Provide(func(live *folderconfig.Live) ports.Config { return live }),
)

// SchemaModule provides the compiler for claim queries.
var SchemaModule = fx.Module("schema",
	fx.Provide(fx.Annotate(func() schema.Compiler { return schema.Compiler{} }, fx.As(new(ports.SchemaCompiler)))),
)

// MetricsModule registers the Prometheus metrics. The sockets are counted
// through an Invoke: they are built on the use cases, which report to the
// metrics, so the metrics cannot take them as an argument.
var MetricsModule = fx.Module("metrics",
	fx.Provide(func(cfg Config, config ports.Config, repo ports.TaskRepository, clock ports.Clock, hub *notify.Hub) *metrics.Metrics {
		maxSockets, maxWaiting := cfg.MaxSocketsPerHost, cfg.MaxWaiting
		if maxSockets == 0 {
			maxSockets = wsapi.DefaultMaxSocketsPerHost
		}
		if maxWaiting == 0 {
			maxWaiting = app.DefaultMaxWaiting
		}
		return metrics.New(metrics.Sources{
			Depths: depths{config, repo}, Clock: clock, Waiting: hub,
			MaxSocketsPerHost: maxSockets, MaxWaiting: maxWaiting,
		})
	}),
	fx.Invoke(func(m *metrics.Metrics, s *wsapi.Sockets) { m.CountSockets(s) }),
)

type depths struct {
	ports.Config
	ports.TaskRepository
}

// ServiceModule builds the use cases and, once everything is open, logs a
// failed event for each corrupt task file the store set aside at start-up,
// then appends the event lines a crash cut (app.Service.RepairLog), so the
// log agrees with the store before the listeners start and the sweep runs.
var ServiceModule = fx.Module("app",
	fx.Provide(func(d struct {
		fx.In
		Repo     ports.TaskRepository
		Syncer   ports.Syncer
		Log      ports.EventLog
		Notifier ports.Notifier
		Clock    ports.Clock
		Compiler ports.SchemaCompiler
		Metrics  *metrics.Metrics
		Activity *dashboard.Activity
		Logger   *zap.Logger
		Config   Config
		Hosts    ports.Config
		Pauses   ports.Pauses
	}) *app.Service {
		// On files many moves back at once share commits; on PostgreSQL
		// each holds one of the pool's connections (16 by default), which
		// the requests need too.
		movesBack := 64
		if d.Config.Store == "postgres" {
			movesBack = 4
		}
		return app.New(app.Deps{
			Repo: d.Repo, Syncer: d.Syncer, Log: d.Log, Notifier: d.Notifier,
			Clock: d.Clock, Compiler: d.Compiler, Observer: observers{d.Metrics, d.Activity}, Logger: d.Logger,
			MaxWaiting: d.Config.MaxWaiting, Pauses: d.Pauses, MovesBackAtOnce: movesBack, Config: d.Hosts,
		})
	}),
	fx.Invoke(func(lc fx.Lifecycle, cfg Config, svc *app.Service, corrupt corruptFiles, config ports.Config, syncer ports.Syncer, logger *zap.Logger) {
		lc.Append(fx.StartHook(func(ctx context.Context) error {
			files := corrupt()
			// The repair goes first: it judges the log as the crash left
			// it, which a corrupt report's line, stamped now, would not be
			// (a restart hours later would put the crash out of its
			// window). Told of the tasks set aside, it does not take them
			// for ones whose clean was cut.
			if cfg.Store != "postgres" { // on PostgreSQL the log is written with the changes: nothing is ever cut
				setAside := make([]domain.Key, 0, len(files))
				for _, c := range files {
					setAside = append(setAside, domain.Key{Host: c.Host, Queue: c.Queue, ID: c.ID})
				}
				if _, err := svc.RepairLog(ctx, config.Queues(), eventlog.NewReader(cfg.Logs), setAside); err != nil {
					return err
				}
			}
			for _, c := range files {
				logger.Warn("corrupt task file moved aside", zap.String("path", c.Path), zap.Error(c.Err))
				if err := svc.ReportCorrupt(ctx, c.Host, c.Queue, c.ID); err != nil {
					return err
				}
			}
			// The moves aside are durable since the store's Open, and no
			// later start reports them again: their lines are made durable
			// now, in one commit, not at whatever commit comes next (a power
			// loss before it would lose them, and a task whose last line was
			// then of its life would pass for one whose clean was cut).
			if len(files) > 0 {
				if err := syncer.Sync(ctx); err != nil {
					return fmt.Errorf("log corrupt task files: %w", err)
				}
			}
			return nil
		}))
	}),
)

// observers tells every one of them of each transition: the metrics and
// the dashboard's rate charts.
type observers []app.Observer

func (o observers) Observe(ev domain.Event) {
	for _, x := range o {
		x.Observe(ev)
	}
}

func (o observers) ResultRefused(q domain.QueueRef) {
	for _, x := range o {
		x.ResultRefused(q)
	}
}

// SweepModule runs the sweep and prunes the event log and the payload
// archive, until stop. Pruning runs beside the sweep, not in it: once a day
// it walks the whole archive, which must not hold up timeouts and lease
// lapses. The sweep's ticks pace it: the first tick prunes (so a server
// started after a while away clears what aged out meanwhile at once), then
// one tick a minute at most.
var SweepModule = fx.Module("sweep",
	fx.Invoke(func(lc fx.Lifecycle, cfg Config, svc *app.Service, config ports.Config, log logPruner, logger *zap.Logger) {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		due := make(chan time.Time, 1)
		var lastPrune time.Time
		afterSweep := func(now time.Time) {
			if !lastPrune.IsZero() && now.Sub(lastPrune) < time.Minute {
				return
			}
			select {
			case due <- now:
				lastPrune = now
			default: // a prune is already waiting to run
			}
		}
		prune := func() {
			for {
				select {
				case <-ctx.Done():
					return
				case now := <-due:
					if err := log.Prune(ctx, now, cfg.LogDays); err != nil && ctx.Err() == nil {
						logger.Warn("prune event log", zap.Error(err))
					}
				}
			}
		}
		lc.Append(fx.Hook{
			OnStart: func(context.Context) error {
				wg.Go(func() { svc.RunSweep(ctx, cfg.Sweep, config.Queues, afterSweep) })
				wg.Go(prune)
				return nil
			},
			OnStop: func(context.Context) error {
				cancel()
				wg.Wait()
				return nil
			},
		})
	}),
)

// Ready is the readiness flag /readyz reports: up once the API listens,
// down as soon as shutdown begins; and whether the server has stopped
// writing after a failure (Stopped).
type Ready struct {
	atomic.Bool
	// stopped reports a failure after which every write fails until a
	// restart (durable.Syncer.Err); nil: none can happen. Set before
	// serving.
	stopped func() error
}

// Stopped is the failure after which every write fails until a restart,
// or nil.
func (r *Ready) Stopped() error {
	if r.stopped == nil {
		return nil
	}
	return r.stopped()
}

// healthHandlers are /healthz and /readyz. A server whose journal stopped
// after a failed flush is alive but useless, and only a restart (which
// replays the journal) mends it: both answer 503, so a supervisor's
// liveness probe restarts it and its readiness probe sends no clients.
func healthHandlers(ready *Ready) (healthz, readyz http.HandlerFunc) {
	failed := func(w http.ResponseWriter) bool {
		if err := ready.Stopped(); err != nil {
			http.Error(w, "stopped: "+err.Error(), http.StatusServiceUnavailable)
			return true
		}
		return false
	}
	healthz = func(w http.ResponseWriter, _ *http.Request) {
		if !failed(w) {
			_, _ = w.Write([]byte("ok\n"))
		}
	}
	readyz = func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case failed(w):
		case !ready.Load():
			http.Error(w, "not ready", http.StatusServiceUnavailable)
		default:
			_, _ = w.Write([]byte("ready\n"))
		}
	}
	return healthz, readyz
}

// HTTPModule serves the API. Its start hook binds the listener, so a port in
// use fails start-up; its stop hook drains waiting claims, then lets requests
// in flight finish for up to ShutdownGrace.
var HTTPModule = fx.Module("httpapi",
	fx.Provide(func() *Ready { return &Ready{} }),
	fx.Provide(func(cfg Config, svc *app.Service, config ports.Config, m *metrics.Metrics, sockets httpapi.Sockets, logs httpapi.LogReader, dash *dashboard.Dashboard, ready *Ready, logger *zap.Logger) *httpapi.API {
		return httpapi.New(svc, config, httpapi.Options{
			Logger:     logger,
			Middleware: []func(http.Handler) http.Handler{httpapi.RequestLog(logger.Named("http")), m.Middleware, crossOrigin},
			Sockets:    sockets,
			Logs:       logs,
			Dashboard:  dash,
			Stopped:    ready.Stopped,
		})
	}),
	// A reload ends the waiting claims whose queue or right went. Off the
	// reloading goroutine, as the sockets' recheck.
	fx.Invoke(func(live *folderconfig.Live, api *httpapi.API) {
		live.OnReload(func(*folderconfig.Snapshot) { go api.Recheck() })
	}),
	fx.Invoke(func(lc fx.Lifecycle, cfg Config, api *httpapi.API, svc *app.Service, ready *Ready, logger *zap.Logger) {
		srv := &http.Server{
			Handler:           api,
			ReadHeaderTimeout: ReadHeaderTimeout,
			ReadTimeout:       ReadTimeout,
			IdleTimeout:       IdleTimeout,
			ErrorLog:          zap.NewStdLog(logger.Named("http")),
		}
		lc.Append(fx.Hook{
			OnStart: func(context.Context) error {
				return listen(srv, cfg.Addr, "api", cfg.MaxConns, logger, func() { ready.Store(true) })
			},
			// The requests get ShutdownGrace of their own, well inside
			// fx's StopTimeout, so the hooks after this one still run.
			OnStop: func(context.Context) error {
				ready.Store(false)
				svc.Drain()
				ctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
				defer cancel()
				if err := srv.Shutdown(ctx); err != nil {
					logger.Warn("requests still running at shutdown", zap.Error(err))
					return srv.Close()
				}
				return nil
			},
		})
	}),
)

// WSModule serves the worker and watch sockets. Its stop hook says goodbye
// (1001) to every open socket and waits until each worker socket has put its
// tasks back to pending. fx stops hooks in reverse start order, and this one
// is registered after the store, the event log and the service (which the
// sockets are built on) and before the API's (which routes to them): so it
// runs once the listener no longer accepts, and before the event log is
// flushed and the store closes.
var WSModule = fx.Module("wsapi",
	fx.Provide(func(lc fx.Lifecycle, cfg Config, svc *app.Service, logger *zap.Logger) *wsapi.Sockets {
		s := wsapi.New(svc, wsapi.Options{
			Logger:            logger.Named("ws"),
			PingInterval:      cfg.WSPing,
			PeerTimeout:       cfg.WSPeerTimeout,
			MaxSocketsPerHost: cfg.MaxSocketsPerHost,
		})
		lc.Append(fx.StopHook(s.Close))
		return s
	}),
	fx.Provide(func(s *wsapi.Sockets) httpapi.Sockets { return s }),
	// A reload reaches the open sockets: those whose queue went or whose
	// right was taken are let go. Off the reloading goroutine, which should
	// not wait on sockets.
	fx.Invoke(func(live *folderconfig.Live, s *wsapi.Sockets) {
		live.OnReload(func(*folderconfig.Snapshot) { go s.Recheck() })
	}),
)

// DashboardModule serves the live dashboard at /_dash of every host
// (adapters/dashboard). Its rates are fed by the service's observer; its
// stop hook, which runs after the API's listener has stopped, says goodbye
// to the live sockets.
var DashboardModule = fx.Module("dashboard",
	fx.Provide(dashboard.NewActivity),
	fx.Provide(func(lc fx.Lifecycle, svc *app.Service, config ports.Config, act *dashboard.Activity, sockets *wsapi.Sockets, hub *notify.Hub, clock ports.Clock, logger *zap.Logger) *dashboard.Dashboard {
		d := dashboard.New(dashboard.Options{
			Service: svc, Config: config, Activity: act, Workers: sockets, Waiting: hub, Clock: clock,
			Logger: logger.Named("dashboard"),
		})
		lc.Append(fx.StopHook(d.Close))
		return d
	}),
)

// crossOrigin refuses state-changing requests a browser sends from another
// site (Sec-Fetch-Site, or an Origin that is not the Host: the standard
// library's CrossOriginProtection). Nothing authenticates by cookie, so a
// forged request carries no token anyway; this also covers queues whose
// actions are public, which a page elsewhere could otherwise drive through
// a visitor's browser. Clients that are not browsers send neither header
// and pass.
func crossOrigin(next http.Handler) http.Handler {
	p := http.NewCrossOriginProtection()
	p.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		httperr.Of(errCrossOrigin).Write(w)
	}))
	return p.Handler(next)
}

var errCrossOrigin = domain.E(domain.KindForbidden, domain.CodeForbidden,
	"a browser request from another site may not change anything here")

// AdminModule serves /metrics, /healthz and /readyz on the admin listener.
var AdminModule = fx.Module("admin",
	fx.Invoke(func(lc fx.Lifecycle, cfg Config, m *metrics.Metrics, ready *Ready, logger *zap.Logger) {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", m.Handler())
		// Profiles for operators; the admin listener is loopback by default.
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
		healthz, readyz := healthHandlers(ready)
		mux.HandleFunc("GET /healthz", healthz)
		mux.HandleFunc("GET /readyz", readyz)
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		lc.Append(fx.Hook{
			OnStart: func(context.Context) error { return listen(srv, cfg.AdminAddr, "admin", 0, logger, nil) },
			OnStop:  func(ctx context.Context) error { return srv.Close() },
		})
	}),
)

// limitListener accepts at most n connections at once: past that, Accept
// waits until one closes, and new clients queue in the kernel's backlog
// instead of each costing the server a goroutine and buffers.
func limitListener(ln net.Listener, n int) net.Listener {
	return &limited{Listener: ln, slots: make(chan struct{}, n), closed: make(chan struct{})}
}

type limited struct {
	net.Listener
	slots     chan struct{}
	closed    chan struct{}
	closeOnce sync.Once
}

func (l *limited) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.closed:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitedConn{Conn: c, release: func() { <-l.slots }}, nil
}

// Close also ends an Accept waiting for a free slot.
func (l *limited) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// listen binds addr (so a taken port fails start-up) and serves in the
// background. It logs the bound address: with port 0 that is how tests and
// operators learn the port.
func listen(srv *http.Server, addr, name string, maxConns int, logger *zap.Logger, up func()) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s listener: %w", name, err)
	}
	if maxConns > 0 {
		ln = limitListener(ln, maxConns)
	}
	logger.Info("listening", zap.String("listener", name), zap.String("addr", ln.Addr().String()))
	if up != nil {
		up()
	}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("serve", zap.String("listener", name), zap.Error(err))
		}
	}()
	return nil
}
