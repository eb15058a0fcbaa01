// Package testbin builds the real taskhoster binary once for a test
// package (end-to-end and fault tests start it as a separate process) and
// reads the lines it logs.
package testbin

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Main builds cmd/taskhoster into a temporary folder, stores its path in
// *binary, runs the package's tests and removes the folder. With race the
// binary is built with the race detector too, so a test run under -race
// also checks the server. Use it as TestMain's body:
//
//	func TestMain(m *testing.M) { os.Exit(testbin.Main(m, raceEnabled, &binary)) }
func Main(m *testing.M, race bool, binary *string) int {
	dir, err := os.MkdirTemp("", "taskhoster-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	*binary = filepath.Join(dir, "taskhoster")
	args := []string{"build", "-o", *binary}
	if race {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "github.com/taskhoster/taskhoster/cmd/taskhoster")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build taskhoster:", err)
		return 1
	}
	return m.Run()
}

// Listening reads one line of the server's log: the "listening" line names
// a listener ("api" or "admin") and the address it bound, which is how a
// test started with port 0 learns its port.
func Listening(line string) (listener, addr string, ok bool) {
	var entry struct{ Msg, Listener, Addr string }
	if json.Unmarshal([]byte(line), &entry) != nil || entry.Msg != "listening" {
		return "", "", false
	}
	return entry.Listener, entry.Addr, true
}
