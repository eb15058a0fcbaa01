package bench

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// clusterCPU counts the postmaster's own CPU, its live children's and,
// once they have exited and been reaped, theirs too: a backend whose
// connection closed during a run still counts. The test process plays the
// postmaster.
func TestClusterCPUCountsReapedChildren(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "postmaster.pid"), []byte(strconv.Itoa(os.Getpid())+"\n/data\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before, err := clusterCPU(dir)
	if err != nil {
		t.Fatal(err)
	}
	// A child that burns CPU until it has used 200 ms, then exits.
	cmd := exec.Command("sh", "-c", `while :; do :; done`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		used, err := ProcessCPU(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		if used >= 200*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the child used under 200 ms of CPU in 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	live, err := clusterCPU(dir)
	if err != nil {
		t.Fatal(err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait() // reaped: its CPU moves to our cutime and cstime
	reaped, err := clusterCPU(dir)
	if err != nil {
		t.Fatal(err)
	}
	if live-before < 200*time.Millisecond {
		t.Errorf("with the child alive: %v more, want at least its 200 ms", live-before)
	}
	if reaped < live {
		t.Errorf("after the child was reaped: %v, less than the %v while it lived", reaped, live)
	}
}
