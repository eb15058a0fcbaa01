// Package packaging checks what the Makefile ships: the release build's
// stamped version, `make install`'s layout and systemd unit, and the
// container image. Each test runs the real make target.
package packaging

import (
	"bufio"
	"bytes"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// root is the repository, two folders up from this package.
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// runMake runs make -s in the repository with args and returns its output.
func runMake(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("make", append([]string{"-s", "-C", root(t)}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func output(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = root(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}

// gitStamp is what make release stamps in: git's description and commit.
func gitStamp(t *testing.T) (version, commit string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("SKIP: git is not installed: make release has no version to stamp")
	}
	if err := exec.Command("git", "-C", root(t), "rev-parse", "HEAD").Run(); err != nil {
		t.Skip("SKIP: not a git checkout: make release has no version to stamp")
	}
	return output(t, "git", "describe", "--tags", "--always", "--dirty"), output(t, "git", "rev-parse", "HEAD")
}

func TestReleaseStampsTheVersion(t *testing.T) {
	version, commit := gitStamp(t)
	dir := t.TempDir()
	first, second := filepath.Join(dir, "a", "taskhoster"), filepath.Join(dir, "b", "taskhoster")
	runMake(t, "release", "RELEASE_BIN="+first)

	want := fmt.Sprintf("taskhoster %s (commit %s)", version, commit)
	for _, arg := range []string{"--version", "version"} {
		if got := output(t, first, arg); got != want {
			t.Errorf("taskhoster %s printed %q, want %q", arg, got, want)
		}
	}

	// Static: no program interpreter, no shared libraries (it runs on scratch).
	f, err := elf.Open(first)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the release binary asks for a dynamic loader (PT_INTERP): not static")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the release binary needs shared libraries %v", libs)
	}

	// Reproducible: the same commit builds the same bytes.
	runMake(t, "release", "RELEASE_BIN="+second)
	a, errA := os.ReadFile(first)
	b, errB := os.ReadFile(second)
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if !bytes.Equal(a, b) {
		t.Error("two release builds of one commit differ")
	}
}

// A build without the release flags still names its commit when Go recorded
// one (go build in a git checkout, -buildvcs on).
func TestVersionFallsBackToBuildInfo(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "taskhoster")
	build := exec.Command("go", "build", "-buildvcs=true", "-o", bin, "./cmd/taskhoster")
	build.Dir = root(t)
	build.Env = append(os.Environ(), "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Skipf("SKIP: go build -buildvcs=true fails here (no git checkout?): %v\n%s", err, out)
	}
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		t.Skip("SKIP: Go recorded no vcs.revision for this build (a git worktree, say): nothing to fall back to")
	}
	if modified == "true" {
		rev += "-dirty"
	}
	if got, want := output(t, bin, "--version"), "taskhoster dev (commit "+rev+")"; got != want {
		t.Errorf("--version printed %q, want %q", got, want)
	}
}

func TestInstall(t *testing.T) {
	for _, tc := range []struct {
		name, prefix string
		extra        []string
		unit         string // where the unit lands under the prefix
	}{
		{name: "default prefix", prefix: "/usr/local", unit: "lib/systemd/system"},
		{name: "a package's prefix", prefix: "/usr", extra: []string{"PREFIX=/usr"}, unit: "lib/systemd/system"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			dest := filepath.Join(dir, "root")
			args := append([]string{"install", "DESTDIR=" + dest, "RELEASE_BIN=" + filepath.Join(dir, "release", "taskhoster")}, tc.extra...)
			runMake(t, args...)

			bin := filepath.Join(dest, tc.prefix, "bin", "taskhoster")
			mustMode(t, bin, 0o755)
			if got := output(t, bin, "--version"); !strings.HasPrefix(got, "taskhoster ") {
				t.Errorf("the installed binary's --version printed %q", got)
			}
			unitPath := filepath.Join(dest, tc.prefix, tc.unit, "taskhoster.service")
			mustMode(t, unitPath, 0o644)
			mustMode(t, filepath.Join(dest, tc.prefix, "lib", "sysusers.d", "taskhoster.conf"), 0o644)
			if st, err := os.Stat(filepath.Join(dest, "etc", "taskhoster", "hosts")); err != nil || !st.IsDir() {
				t.Errorf("no /etc/taskhoster/hosts folder: %v", err)
			}
			unit, err := os.ReadFile(unitPath)
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range []string{
				"ExecStart=" + tc.prefix + "/bin/taskhoster serve",
				"Environment=TASKHOSTER_HOSTS=/etc/taskhoster/hosts",
				"Environment=TASKHOSTER_ITEMS=/var/lib/taskhoster/items",
				"Environment=TASKHOSTER_LOGS=/var/lib/taskhoster/logs",
				"StateDirectory=taskhoster",
				"User=taskhoster",
			} {
				if !hasLine(unit, line) {
					t.Errorf("the unit lacks the line %q", line)
				}
			}
			if bytes.Contains(unit, []byte("@BINDIR@")) {
				t.Error("the unit still has the @BINDIR@ placeholder")
			}
			verifyUnit(t, unit, tc.prefix+"/bin/taskhoster", bin)
		})
	}
}

// verifyUnit runs systemd-analyze on the unit, with its ExecStart pointed at
// the binary where it was installed under DESTDIR (verify checks that the
// command exists): verify must find nothing to say, and the offline security
// review must rate its exposure 2.0 or lower (of 10).
func verifyUnit(t *testing.T, unit []byte, installedAt, binaryNow string) {
	t.Helper()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("SKIP: systemd-analyze is not installed: the unit is not verified")
	}
	path := filepath.Join(t.TempDir(), "taskhoster.service")
	if err := os.WriteFile(path, bytes.ReplaceAll(unit, []byte(installedAt), []byte(binaryNow)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, err = exec.Command(analyze, "security", "--offline=yes", "--threshold=20", path).CombinedOutput()
	if err != nil {
		t.Errorf("systemd-analyze security rates the unit over 2.0: %v\n%s", err, lastLines(out, 3))
	}
}

func TestDockerImage(t *testing.T) {
	docker, err := exec.LookPath("docker")
	if err != nil {
		t.Skip("SKIP: no docker command: the image is not built")
	}
	if out, err := exec.Command(docker, "info").CombinedOutput(); err != nil {
		t.Skipf("SKIP: docker is installed but no daemon answers (docker info: %v: %s): the image is not built or run", err, lastLines(out, 1))
	}
	image := fmt.Sprintf("taskhoster-test:%d", time.Now().UnixNano())
	runMake(t, "docker", "IMAGE="+image)
	t.Cleanup(func() { _ = exec.Command(docker, "rmi", "-f", image).Run() })

	// A hosts folder the image's user (nobody) can read.
	hosts := t.TempDir()
	queue := filepath.Join(hosts, "task.example.com", "taskhoster-queues", "public.json")
	if err := os.MkdirAll(filepath.Dir(queue), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(queue, []byte(`{"item": {}, "access": {"post": "public", "status": "public", "work": "public"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{hosts, filepath.Join(hosts, "task.example.com")} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	id := output(t, docker, "run", "-d", "-p", "127.0.0.1::8080", "-v", hosts+":/etc/taskhoster/hosts:ro", image)
	t.Cleanup(func() { _ = exec.Command(docker, "rm", "-f", id).Run() })
	waitListening(t, docker, id)
	addr := output(t, docker, "port", id, "8080/tcp")
	addr = strings.Split(addr, "\n")[0]

	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/public", strings.NewReader(`{"n": 1}`))
	req.Host = "task.example.com"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("post to the container: %d %s", resp.StatusCode, body)
	}
	var posted struct{ ID, Status string }
	if err := json.Unmarshal(body, &posted); err != nil || posted.Status != "pending" {
		t.Fatalf("post answered %s (%v)", body, err)
	}

	req, _ = http.NewRequest(http.MethodGet, "http://"+addr+"/public/"+posted.ID, nil)
	req.Host = "task.example.com"
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	var view struct{ ID, Status string }
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &view) != nil || view.ID != posted.ID || view.Status != "pending" {
		t.Fatalf("status from the container: %d %s", resp.StatusCode, body)
	}
}

// waitListening follows the container's log until the API listens.
func waitListening(t *testing.T, docker, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	logs := exec.CommandContext(ctx, docker, "logs", "-f", id)
	pipe, err := logs.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	logs.Stdout = io.Discard
	if err := logs.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = logs.Wait() }()
	var seen strings.Builder
	sc := bufio.NewScanner(pipe)
	for sc.Scan() {
		seen.WriteString(sc.Text() + "\n")
		var entry struct{ Msg, Listener string }
		if json.Unmarshal(sc.Bytes(), &entry) == nil && entry.Msg == "listening" && entry.Listener == "api" {
			return
		}
	}
	t.Fatalf("the container did not listen within 60s:\n%s", seen.String())
}

func mustMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatalf("not installed: %v", err)
	}
	if got := st.Mode().Perm(); got != want {
		t.Errorf("%s has mode %o, want %o", path, got, want)
	}
}

func hasLine(text []byte, line string) bool {
	for _, l := range strings.Split(string(text), "\n") {
		if strings.TrimSpace(l) == line {
			return true
		}
	}
	return false
}

func lastLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}
