package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/beanstalkd/go-beanstalk"
)

// Beanstalkd is a beanstalkd process the bench started on loopback.
type Beanstalkd struct {
	Addr   string
	cmd    *exec.Cmd
	exited chan struct{}
	stderr bytes.Buffer
}

// StartBeanstalkd runs binary on a free loopback port. With binlog not
// empty it keeps its binlog there and fsyncs after every write (-f 0);
// without, it keeps jobs in memory only.
func StartBeanstalkd(binary, binlog string) (*Beanstalkd, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	args := []string{"-l", "127.0.0.1", "-p", strconv.Itoa(port)}
	if binlog != "" {
		args = append(args, "-b", binlog, "-f", "0")
	}
	b := &Beanstalkd{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), exited: make(chan struct{})}
	b.cmd = exec.Command(binary, args...)
	b.cmd.Stderr = &b.stderr
	if err := b.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", binary, err)
	}
	go func() { _ = b.cmd.Wait(); close(b.exited) }()
	// Wait for it to listen: a bounded number of tries, a few ms apart.
	for range 500 {
		select {
		case <-b.exited:
			return nil, fmt.Errorf("beanstalkd exited at start: %s", b.stderr.String())
		default:
		}
		if c, err := net.DialTimeout("tcp", b.Addr, time.Second); err == nil {
			c.Close()
			return b, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Stop()
	return nil, errors.New("beanstalkd did not listen within 5 s")
}

// Stop ends beanstalkd.
func (b *Beanstalkd) Stop() {
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.exited:
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.exited
	}
}

// freePort asks the kernel for a free loopback port. Another process
// could take it before beanstalkd binds it; StartBeanstalkd then fails.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

const beanstalkTube = "bench"

// BeanstalkThroughput runs ld against beanstalkd at addr, as Throughput
// does against Taskhoster: P producers put (one connection each), W×K
// worker connections reserve and delete (a beanstalk connection holds one
// command at a time, so K tasks in flight per worker take K connections).
// Every job must be deleted exactly once, as the clients saw it and by
// the server's own counters.
func BeanstalkThroughput(ctx context.Context, addr string, ld Load) (LoadRun, error) {
	l := newLedger(ld.N)
	var workers []func(context.Context)
	var conns []*beanstalk.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	dial := func() (*beanstalk.Conn, error) {
		c, err := beanstalk.Dial("tcp", addr)
		if err == nil {
			conns = append(conns, c)
		}
		return c, err
	}
	for range ld.W * ld.K {
		c, err := dial()
		if err != nil {
			return LoadRun{}, err
		}
		ts := beanstalk.NewTubeSet(c, beanstalkTube)
		workers = append(workers, func(context.Context) { beanstalkWorker(c, ts, l) })
	}
	producers := make(chan *beanstalk.Tube, ld.P)
	for range ld.P {
		c, err := dial()
		if err != nil {
			return LoadRun{}, err
		}
		producers <- beanstalk.NewTube(c, beanstalkTube)
	}
	// produce runs P goroutines; each takes a connection of its own.
	post := func(_ context.Context, _ int, body []byte) (string, error) {
		t := <-producers
		defer func() { producers <- t }()
		id, err := t.Put(body, 0, 0, 10*time.Minute)
		return strconv.FormatUint(id, 10), err
	}
	r, err := runLoad(ctx, ld, l, workers, single(post))
	if err != nil {
		return r, err
	}
	stats, err := conns[0].Stats()
	if err != nil {
		return r, err
	}
	if stats["cmd-delete"] != strconv.Itoa(ld.N) || stats["current-jobs-ready"] != "0" || stats["current-jobs-reserved"] != "0" {
		return r, fmt.Errorf("beanstalkd counts: cmd-delete %s (want %d), ready %s, reserved %s",
			stats["cmd-delete"], ld.N, stats["current-jobs-ready"], stats["current-jobs-reserved"])
	}
	return r, nil
}

// beanstalkWorker reserves a job, deletes it, and again, until the run stops.
func beanstalkWorker(c *beanstalk.Conn, ts *beanstalk.TubeSet, l *ledger) {
	for !l.stopped() {
		id, body, err := ts.Reserve(time.Second)
		if errors.Is(err, beanstalk.ErrTimeout) {
			continue
		}
		if err != nil {
			if !l.stopped() {
				l.fail(fmt.Errorf("reserve: %w", err))
			}
			return
		}
		seq, ok := l.deliver(body)
		if !ok {
			return
		}
		if err := c.Delete(id); err != nil {
			l.fail(fmt.Errorf("delete job %d: %w", id, err))
			return
		}
		l.accept(seq, strconv.FormatUint(id, 10))
	}
}

// FloorRun is one fsfloor run: its cycle rate (a task's post, claim and
// finish, as bare file operations) and the line it printed.
type FloorRun struct {
	TPS  float64
	Line string
}

// Fsfloor runs the fsfloor tool at binary on a fresh directory under root
// with mode, c goroutines and n tasks.
func Fsfloor(ctx context.Context, binary, root, mode string, c, n int) (FloorRun, error) {
	cmd := exec.CommandContext(ctx, binary, "-root", root, "-mode", mode, "-c", strconv.Itoa(c), "-n", strconv.Itoa(n))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return FloorRun{}, fmt.Errorf("fsfloor -mode %s: %w: %s", mode, err, errb.String())
	}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		line := sc.Text()
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "cycle_tps="); ok {
				tps, err := strconv.ParseFloat(v, 64)
				return FloorRun{TPS: tps, Line: line}, err
			}
		}
	}
	return FloorRun{}, fmt.Errorf("fsfloor printed no cycle_tps: %q", out.String())
}
