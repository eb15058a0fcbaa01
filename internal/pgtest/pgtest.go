// Package pgtest starts a throwaway PostgreSQL cluster for tests: Debian's
// server binaries (/usr/lib/postgresql/*/bin), a data folder in a temp
// directory, a free loopback port, fsync off. One cluster serves a test
// binary (started by the first Database call, stopped by Main), and each
// Database call gets a fresh database in it.
//
// A package that uses it runs its tests through Main (or calls Stop after
// them):
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// Without PostgreSQL installed, Database skips the test and says why.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// NotInstalled is why tests skip on a machine without PostgreSQL.
const NotInstalled = "PostgreSQL not installed (/usr/lib/postgresql/*/bin/initdb): install postgresql, as .ci/run does"

var (
	once    sync.Once
	shared  *Cluster
	failed  error
	skipped bool
	dbs     atomic.Int64
)

// Main runs the package's tests and stops the cluster they started, if any.
func Main(m *testing.M) {
	code := m.Run()
	Stop()
	os.Exit(code)
}

// Stop stops the package's cluster, if one was started: for a TestMain
// that runs its tests some other way than Main.
func Stop() {
	if shared != nil {
		shared.Stop()
	}
}

// Database returns the URL of a new, empty database in the package's
// cluster, starting the cluster on first use. It skips tb when PostgreSQL
// is not installed, and fails it when the cluster cannot start.
func Database(tb testing.TB) string {
	tb.Helper()
	once.Do(func() {
		bin, ok := BinDir()
		if !ok {
			skipped = true
			return
		}
		shared, failed = Start(bin)
	})
	switch {
	case skipped:
		tb.Skip(NotInstalled)
	case failed != nil:
		tb.Fatalf("start PostgreSQL: %v", failed)
	}
	name := fmt.Sprintf("t%d", dbs.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, shared.URL("postgres"))
	if err != nil {
		tb.Fatalf("connect to the test cluster: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		tb.Fatalf("create database %s: %v", name, err)
	}
	return shared.URL(name)
}

// BinDir finds the newest installed PostgreSQL's binaries.
func BinDir() (string, bool) {
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Slice(found, func(i, j int) bool { return version(found[i]) > version(found[j]) })
	if len(found) > 0 {
		return filepath.Dir(found[0]), true
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), true
	}
	return "", false
}

// version is the major version in a path /usr/lib/postgresql/N/bin/initdb.
func version(initdb string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
	return n
}

// Cluster is a running throwaway PostgreSQL server.
type Cluster struct {
	Port int
	dir  string
	bin  string
	cmd  *exec.Cmd
	done chan struct{}
}

// Start initialises a cluster in a new temp folder with the binaries in
// bin and starts it on a free loopback port. As root it runs the server as
// the postgres user, which PostgreSQL requires.
func Start(bin string) (*Cluster, error) {
	dir, err := os.MkdirTemp("", "taskhoster-pg-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, bin: bin, done: make(chan struct{})}
	if err := c.start(bin); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(bin string) error {
	cred, err := credential()
	if err != nil {
		return err
	}
	if cred != nil {
		if err := os.Chown(c.dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return err
		}
	}
	data := filepath.Join(c.dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %v: %s", err, out)
	}
	if c.Port, err = freePort(); err != nil {
		return err
	}
	return c.run(cred)
}

// run starts the server on the cluster's data folder and port and waits
// until it takes connections.
func (c *Cluster) run(cred *syscall.Credential) error {
	data := filepath.Join(c.dir, "data")
	c.done = make(chan struct{})
	c.cmd = exec.Command(filepath.Join(c.bin, "postgres"), "-D", data,
		"-c", "listen_addresses=127.0.0.1", "-c", "port="+strconv.Itoa(c.Port),
		"-c", "unix_socket_directories="+c.dir, "-c", "fsync=off",
		"-c", "full_page_writes=off", "-c", "max_connections=300")
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	log, err := os.OpenFile(filepath.Join(c.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	c.cmd.Stdout, c.cmd.Stderr = log, log
	if err := c.cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start postgres: %w", err)
	}
	cmd, done := c.cmd, c.done
	go func() {
		_ = cmd.Wait()
		log.Close()
		close(done)
	}()
	return c.ready()
}

// Halt shuts the server down (fast shutdown: open sessions are ended,
// what was committed is on disc) and keeps its data folder, for Resume.
func (c *Cluster) Halt() error {
	if c.cmd == nil || c.cmd.Process == nil {
		return errors.New("the cluster is not running")
	}
	_ = c.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-c.done:
		return nil
	case <-time.After(20 * time.Second):
		return errors.New("postgres did not stop within 20 s")
	}
}

// Crash kills the server and every backend with SIGKILL, as a crash
// does, and keeps its data folder: Resume recovers it from the WAL.
// (With fsync off only a crash of the machine could lose committed
// data; a crash of the processes cannot.)
func (c *Cluster) Crash() error {
	if c.cmd == nil || c.cmd.Process == nil {
		return errors.New("the cluster is not running")
	}
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL) // the process group: postmaster and backends
	select {
	case <-c.done:
	case <-time.After(20 * time.Second):
		return errors.New("postgres did not die within 20 s of SIGKILL")
	}
	// Backends die with the group; wait until none holds the data folder.
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(-c.cmd.Process.Pid, 0) == nil {
		if time.Now().After(deadline) {
			return errors.New("postgres backends still alive 10 s after SIGKILL")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// Resume starts a halted or crashed server again on the same data folder
// and port, and waits until it takes connections.
func (c *Cluster) Resume() error {
	select {
	case <-c.done:
	default:
		return errors.New("the cluster is still running")
	}
	cred, err := credential()
	if err != nil {
		return err
	}
	return c.run(cred)
}

// Log is the server's log so far (of every run of it).
func (c *Cluster) Log() string {
	out, _ := os.ReadFile(filepath.Join(c.dir, "server.log"))
	return string(out)
}

// ready waits until the server takes connections.
func (c *Cluster) ready() error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		cancel()
		if err == nil {
			return conn.Close(context.Background())
		}
		select {
		case <-c.done:
			out, _ := os.ReadFile(filepath.Join(c.dir, "server.log"))
			return fmt.Errorf("postgres exited: %s", out)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres not ready after 30 s: %w", err)
		}
	}
}

// URL is the connection URL of database name.
func (c *Cluster) URL(name string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port, name)
}

// Stop shuts the server down (fast shutdown) and removes its folder.
func (c *Cluster) Stop() {
	if c.cmd != nil && c.cmd.Process != nil && !c.exited() {
		_ = c.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-c.done:
		case <-time.After(20 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	}
	_ = os.RemoveAll(c.dir)
}

// exited reports whether the server's last run has ended.
func (c *Cluster) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// credential is whom the server runs as: nil (this process's user), or the
// postgres user when running as root.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, errors.New("running as root, and there is no postgres user to run PostgreSQL as")
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// freePort asks the kernel for a loopback port that is free now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
