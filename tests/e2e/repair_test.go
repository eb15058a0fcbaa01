package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/taskhoster/taskhoster/adapters/clock"
)

// TestRepairAfterALongStopWithACorruptFile: a power loss typically leaves
// both a cut line and a spoilt task file, and the machine may come back
// hours later. The start-up sets the spoilt file aside with a failed line
// stamped now; the repair must still append the line the crash cut, which
// it judges by the log as the crash left it, not by that new line.
func TestRepairAfterALongStopWithACorruptFile(t *testing.T) {
	t.Parallel()
	for _, corrupt := range []bool{false, true} {
		name := "alone"
		if corrupt {
			name = "with a corrupt file"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := newDirs(t)
			// The first run is three hours ago.
			before, err := launchEnv(t, d, []string{clock.SkewEnv + "=-3h"})
			if err != nil {
				t.Fatal(err)
			}
			id := before.post("resize", aliceToken, `{"url":"a"}`)
			if r := before.do("POST", "/resize/claim", boxToken, `{"worker":"w"}`); r.Status != 200 {
				t.Fatalf("claim: %d %s", r.Status, r.Body)
			}
			before.stop()
			// The crash cut the claim's line, the last one.
			days, _ := filepath.Glob(filepath.Join(d.logs, "tasks", "*.jsonl"))
			last := days[len(days)-1]
			data, err := os.ReadFile(last)
			if err != nil {
				t.Fatal(err)
			}
			cut := bytes.LastIndexByte(data[:len(data)-1], '\n') + 1
			if err := os.WriteFile(last, data[:cut], 0o644); err != nil {
				t.Fatal(err)
			}
			if corrupt {
				writeFile(t, before.taskFile("resize", "pending", "fedcba9876543210"), "")
			}

			s := start(t, d)
			if got, want := s.eventsOf(id), []string{"posted", "claimed"}; !slices.Equal(got, want) {
				t.Errorf("events of %s after the restart = %v, want %v", id, got, want)
			}
		})
	}
}

// TestCorruptReportOutlivesAPowerLoss: the failed line of a task file set
// aside at start-up is made durable with the move aside, before anything
// is served. A power loss soon after the start must not lose it: the file
// is in corrupt/ by then and no later start reports it again, and the
// repair would take the task, gone from the store after its posted line,
// for one whose clean was cut.
func TestCorruptReportOutlivesAPowerLoss(t *testing.T) {
	t.Parallel()
	d := newDirs(t)
	s := start(t, d, "--sync", "always")
	id := s.post("resize", aliceToken, `{"url":"a"}`)
	s.stop()
	days, _ := filepath.Glob(filepath.Join(d.logs, "tasks", "*.jsonl"))
	if len(days) != 1 {
		t.Fatalf("day files: %v", days)
	}
	before, err := os.ReadFile(days[0])
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, s.taskFile("resize", "pending", id), "{not json")

	s = start(t, d, "--sync", "always")
	if got := s.eventsOf(id); !slices.Equal(got, []string{"posted", "failed"}) {
		t.Fatalf("events of %s after the start = %v", id, got)
	}
	s.kill()
	// The power loss: what no commit made durable never reached the disc.
	if err := os.WriteFile(days[0], before, 0o644); err != nil {
		t.Fatal(err)
	}

	s = startAfterReboot(t, d, "--sync", "always")
	if got, want := s.eventsOf(id), []string{"posted", "failed"}; !slices.Equal(got, want) {
		t.Errorf("events of %s after the power loss = %v, want %v", id, got, want)
	}
}
