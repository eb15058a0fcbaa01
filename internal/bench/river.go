package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
)

// RiverName is the River contender's name in the peer tables.
const RiverName = "river"

// RiverRun is what the River peer (bench/river, a module of its own)
// prints for one run.
type RiverRun struct {
	TPS               float64 `json:"tps"`
	N                 int     `json:"n"`
	Seconds           float64 `json:"seconds"`
	SynchronousCommit string  `json:"synchronous_commit"`
	FetchCooldownMs   float64 `json:"fetch_cooldown_ms"`
	Server            string  `json:"server_version"`
	// CPU is the peer process's CPU ms per job (River's client and the
	// producers, measured by the bench from the exited process).
	CPU float64 `json:"-"`
	// Idle and KernelThreads are the machine's idle share and its kernel
	// threads' over the peer process's life (its start and River's
	// migration too, a small part of a run), as LoadRun's.
	Idle          *float64 `json:"-"`
	KernelThreads *float64 `json:"-"`
}

// riverArgs are the River peer's flags for ld against url: the bench's
// workload (P producers, one job per transaction, or ld.Batch per
// InsertManyTx when above 1; W×K jobs in flight) and
// River's FetchCooldown at its minimum, 1 ms (its default, 100 ms, caps a
// client at W×K jobs per 100 ms whatever the database allows).
func riverArgs(url string, ld Load) []string {
	args := []string{
		"-database-url", url,
		"-n", strconv.Itoa(ld.N), "-p", strconv.Itoa(ld.P), "-w", strconv.Itoa(ld.W), "-k", strconv.Itoa(ld.K),
		"-item-bytes", strconv.Itoa(ld.ItemBytes), "-fetch-cooldown", "1ms",
	}
	if ld.Batch > 1 {
		args = append(args, "-batch", strconv.Itoa(ld.Batch))
	}
	if ld.Timeout > 0 {
		args = append(args, "-timeout", ld.Timeout.String())
	}
	return args
}

// River runs the River peer at binary against the database at url with
// ld, and reads the JSON line it prints. The peer refuses to run unless
// synchronous_commit is on.
func River(ctx context.Context, binary, url string, ld Load) (RiverRun, error) {
	cmd := exec.CommandContext(ctx, binary, riverArgs(url, ld)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	machine, _ := readMachineTimes()
	err := cmd.Run()
	idle, kthreads := machine.since()
	if err != nil {
		return RiverRun{}, fmt.Errorf("%s: %w: %s", binary, err, lastLine(errb.String()))
	}
	var r RiverRun
	if err := json.Unmarshal(bytes.TrimSpace(out.Bytes()), &r); err != nil {
		return RiverRun{}, fmt.Errorf("river peer printed %q: %w", out.String(), err)
	}
	r.Idle, r.KernelThreads = idle, kthreads
	if st := cmd.ProcessState; st != nil && r.N > 0 {
		r.CPU = ms(st.UserTime()+st.SystemTime()) / float64(r.N)
	}
	if r.N != ld.N || r.TPS <= 0 {
		return r, fmt.Errorf("river peer: %d jobs at %.0f/s, want %d", r.N, r.TPS, ld.N)
	}
	return r, nil
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := bytes.Split(bytes.TrimSpace([]byte(s)), []byte("\n"))
	return string(lines[len(lines)-1])
}
