package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The peers' PostgreSQL runs: Taskhoster `serve --store postgres` with one
// server and with two (the producers and workers split over both; each
// server on its own port, with the same hosts folder and database), on
// the cluster River runs on. Each run starts on an empty database (wipe),
// and its figures include the database's CPU per task (clusterCPU).

// Names of the Taskhoster-on-PostgreSQL contenders in the peer tables.
const (
	PGOneName = "taskhoster postgres 1 server"
	PGTwoName = "taskhoster postgres 2 servers"
)

// pgName is the contender of a run with servers servers.
func pgName(servers int) string {
	if servers == 1 {
		return PGOneName
	}
	return PGTwoName
}

// pgThroughputOnce runs ld on servers fresh `serve --store postgres`
// processes sharing one hosts folder and the database at c.DatabaseURL,
// emptied first. After the servers stopped, the database's event log must
// hold exactly one "result" line per task. ServerCPU is the servers'
// together; db is the database's CPU ms per task (0 without
// c.DatabaseDir).
func pgThroughputOnce(ctx context.Context, c Config, servers int, ld Load) (r LoadRun, db float64, err error) {
	if err := wipeDatabase(ctx, c.DatabaseURL); err != nil {
		return LoadRun{}, 0, err
	}
	f, err := NewFolders(c.Dir, c.Features)
	if err != nil {
		return LoadRun{}, 0, err
	}
	defer f.Remove()
	var started []*Server
	stop := func() error {
		var errs []error
		for _, s := range started {
			errs = append(errs, s.Stop())
		}
		started = nil
		return errors.Join(errs...)
	}
	defer stop()
	var targets []Target
	for range servers {
		s, err := StartServer(c.Binary, f, "always", c.Timeout, "--store", "postgres", "--database-url", c.DatabaseURL)
		if err != nil {
			return LoadRun{}, 0, err
		}
		started = append(started, s)
		targets = append(targets, s.Target)
	}
	meters := make([]cpuMeter, len(started))
	for i, s := range started {
		meters[i] = startCPU(s.Pid())
	}
	dbm := startClusterCPU(c.DatabaseDir)
	r, ids, err := ThroughputOn(ctx, targets, Socket, ld)
	db = dbm.perTask(ld.N)
	r.ServerCPU, r.ClientCPU = 0, 0
	for _, m := range meters {
		s, cl := m.perTask(ld.N)
		r.ServerCPU += s
		r.ClientCPU = cl // the bench's own: the same meter each time
	}
	if stopErr := stop(); err == nil {
		err = stopErr
	}
	if err == nil {
		err = countDBResults(ctx, c.DatabaseURL, benchHost, benchQueue, ids)
	}
	return r, db, err
}

// taskTables are the tables a Taskhoster server keeps in the database,
// emptied before each run.
var taskTables = []string{"tasks", "event_lines", "log_days", "payloads", "pauses"}

// wipeDatabase empties the Taskhoster tables of the database at url (those
// that exist: a fresh database has none until a server migrates it).
func wipeDatabase(ctx context.Context, url string) error {
	conn, err := connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var present []string
	for _, t := range taskTables {
		var ok bool
		if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, t).Scan(&ok); err != nil {
			return fmt.Errorf("look for table %s: %w", t, err)
		}
		if ok {
			present = append(present, t)
		}
	}
	if len(present) == 0 {
		return nil
	}
	if _, err := conn.Exec(ctx, `TRUNCATE `+strings.Join(present, ", ")); err != nil {
		return fmt.Errorf("empty the task tables: %w", err)
	}
	return nil
}

// countDBResults checks the database's event log as CountResults checks
// day files: each of ids has exactly one "result" line, and no other task
// of the queue has any (the run began on an empty database).
func countDBResults(ctx context.Context, url, host, queue string, ids []string) error {
	conn, err := connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT id, count(*) FROM event_lines
		WHERE host = $1 AND queue = $2 AND convert_from(line, 'UTF8')::jsonb->>'event' = 'result' GROUP BY id`, host, queue)
	if err != nil {
		return fmt.Errorf("count result lines: %w", err)
	}
	got := make(map[string]int64, len(ids))
	for rows.Next() {
		var id string
		var n int64
		if err := rows.Scan(&id, &n); err != nil {
			rows.Close()
			return err
		}
		got[id] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		if n := got[id]; n != 1 {
			errs = append(errs, fmt.Errorf("task %s has %d result lines, want 1", id, n))
		}
		delete(got, id)
		if len(errs) > 10 {
			return errors.Join(errs...)
		}
	}
	for id := range got {
		errs = append(errs, fmt.Errorf("result line for task %s, which the run did not post", id))
		if len(errs) > 10 {
			break
		}
	}
	return errors.Join(errs...)
}

// connect opens a connection to the database at url, which may carry the
// servers' pool_* settings.
func connect(ctx context.Context, url string) (*pgx.Conn, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err == nil {
		var conn *pgx.Conn
		if conn, err = pgx.ConnectConfig(ctx, cfg.ConnConfig); err == nil {
			return conn, nil
		}
	}
	return nil, fmt.Errorf("connect to %s: %w", redactURL(url), err)
}

// redactURL drops a password from a database URL for error messages.
func redactURL(url string) string {
	if cfg, err := pgxpool.ParseConfig(url); err == nil {
		return fmt.Sprintf("postgres://%s@%s:%d/%s", cfg.ConnConfig.User, cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database)
	}
	return "the database"
}

// clusterCPU is the CPU time (user and system) the PostgreSQL cluster with
// data folder dir has used: its postmaster (postmaster.pid) and every
// child of it, live ones from their own /proc stat and those that have
// exited and been reaped from the postmaster's cutime and cstime. So the
// difference of two readings counts the backends of connections that
// closed in between too.
func clusterCPU(dir string) (time.Duration, error) {
	data, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	first, _, _ := strings.Cut(string(data), "\n")
	pm, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return 0, fmt.Errorf("%s/postmaster.pid: %w", dir, err)
	}
	postmaster, err := readProcStat("/proc", pm)
	if err != nil {
		return 0, err
	}
	total := postmaster.cpu + postmaster.reaped
	err = eachProcess("/proc", func(_ int, p procInfo) {
		if p.ppid == pm {
			total += p.cpu
		}
	})
	return total, err
}

// clusterMeter measures the cluster's CPU between start and perTask.
type clusterMeter struct {
	dir  string
	cpu0 time.Duration
	ok   bool
}

func startClusterCPU(dir string) clusterMeter {
	if dir == "" {
		return clusterMeter{}
	}
	cpu, err := clusterCPU(dir)
	return clusterMeter{dir: dir, cpu0: cpu, ok: err == nil}
}

// perTask is the cluster's CPU ms per task since start (0 when unknown).
func (m clusterMeter) perTask(n int) float64 {
	if !m.ok || n == 0 {
		return 0
	}
	cpu, err := clusterCPU(m.dir)
	if err != nil {
		return 0
	}
	return ms(cpu-m.cpu0) / float64(n)
}
