package e2e

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckCommand: `taskhoster check` passes a good folder and, for a bad
// one, prints each error with its file and JSON path and exits non-zero.
func TestCheckCommand(t *testing.T) {
	t.Parallel()
	d := newDirs(t)
	out, err := exec.Command(binary, "check", "--hosts", d.hosts).CombinedOutput()
	if err != nil {
		t.Fatalf("check of a good folder: %v\n%s", err, out)
	}
	writeFile(t, filepath.Join(d.hosts, host, "taskhoster-queues", "bad.json"),
		`{"item":{"type":7},"settings":{"leaseSeconds":-1},"access":{"work":["ghost"]}}`)
	writeFile(t, filepath.Join(d.hosts, host, "taskhoster-queues", "Not A Name.json"), `{}`)
	out, err = exec.Command(binary, "check", "--hosts", d.hosts).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("check of a bad folder exited %v:\n%s", err, out)
	}
	for _, want := range []string{"bad.json: /item", "bad.json: /settings/leaseSeconds", "bad.json: /access/work/0", "warning:"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), aliceToken) {
		t.Errorf("check output shows a token")
	}
}
