package e2e

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/client"
)

// These tests drive SPEC §11 (give-back, failure, heartbeats, delays and
// priorities) through the command-line client and the Go client's Worker.

// retryQueues adds the queues of these tests to a hosts folder, before the
// server starts:
//   - flaky: everything public, a long lease, no limit on attempts.
//   - dead: as flaky, but at most two attempts.
//   - slow: a one-second lease, for heartbeats to keep alive.
//   - tight: as flaky, but bodies of at most 4 KiB.
func retryQueues(t *testing.T, d dirs) {
	t.Helper()
	queues := filepath.Join(d.hosts, host, "taskhoster-queues")
	for name, settings := range map[string]string{
		"flaky": `{"leaseSeconds": 60}`,
		"dead":  `{"leaseSeconds": 60, "maxAttempts": 2}`,
		"slow":  `{"leaseSeconds": 1}`,
		"tight": `{"leaseSeconds": 60, "maxItemBytes": 4096}`,
	} {
		writeFile(t, filepath.Join(queues, name+".json"), `{
			"item": {}, "result": {"type": "object"},
			"settings": `+settings+`,
			"access": {"post": "public", "status": "public", "work": "public"}
		}`)
	}
}

func startRetry(t *testing.T) *server {
	t.Helper()
	d := newDirs(t)
	retryQueues(t, d)
	return start(t, d)
}

// failingCommand writes to stdout and stderr, then exits 3.
const failingCommand = `cat >/dev/null; echo partial; echo "it broke" >&2; exit 3`

// TestCLIWorkReleasesFailingCommand: a command that exits 3 gives its task
// back with the reason {exitCode, stderr, stdout}; so does one whose stdout
// is not JSON (exitCode 0, the stdout kept); --on-error fail fails it and
// --on-error result hands in the older error result. One line per task
// says how it went.
func TestCLIWorkReleasesFailingCommand(t *testing.T) {
	t.Parallel()
	s := startRetry(t)

	id := s.post("flaky", "", `{"n":1}`)
	r := s.cli("", "work", "flaky", "--once", "--exec", failingCommand)
	if r.code != 0 || !strings.Contains(r.stderr, "task "+id+" released in ") || !strings.Contains(r.stderr, "the command exited 3") {
		t.Fatalf("work: exit %d, stderr %s", r.code, r.stderr)
	}
	v := s.view("flaky", "", id)
	if v["status"] != "pending" || v["attempts"] != 1.0 || v["result"] != nil {
		t.Errorf("released task: %v", v)
	}
	if got, want := jsonOf(v["failure"]), `{"exitCode":3,"stderr":"it broke\n","stdout":"partial\n"}`; got != want {
		t.Errorf("failure = %s, want %s", got, want)
	}
	if diff := cmp.Diff([]string{"posted", "claimed", "released"}, s.eventsOf(id)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}

	// The same task again: stdout that is not JSON is kept in the reason.
	r = s.cli("", "work", "flaky", "--once", "--exec", "cat >/dev/null; echo not json")
	if r.code != 0 || !strings.Contains(r.stderr, "task "+id+" released in ") {
		t.Fatalf("work with non-JSON stdout: exit %d, stderr %s", r.code, r.stderr)
	}
	v = s.view("flaky", "", id)
	if got, want := jsonOf(v["failure"]), `{"exitCode":0,"stderr":"","stdout":"not json\n"}`; got != want || v["attempts"] != 2.0 {
		t.Errorf("after non-JSON stdout: failure %s (want %s), attempts %v", got, want, v["attempts"])
	}

	// --on-error fail: failed for good, the reason kept.
	r = s.cli("", "work", "flaky", "--once", "--on-error", "fail", "--exec", failingCommand)
	if r.code != 0 || !strings.Contains(r.stderr, "task "+id+" failed in ") {
		t.Fatalf("work --on-error fail: exit %d, stderr %s", r.code, r.stderr)
	}
	v = s.view("flaky", "", id)
	if v["status"] != "failed" || v["error"] != "failed" || jsonOf(v["failure"]) != `{"exitCode":3,"stderr":"it broke\n","stdout":"partial\n"}` {
		t.Errorf("failed task: %v", v)
	}

	// --on-error result: the older in-band error result finishes the task.
	other := s.post("flaky", "", `{"n":2}`)
	r = s.cli("", "work", "flaky", "--once", "--on-error", "result", "--exec", failingCommand)
	if r.code != 0 || !strings.Contains(r.stderr, "task "+other+" finished in ") {
		t.Fatalf("work --on-error result: exit %d, stderr %s", r.code, r.stderr)
	}
	v = s.view("flaky", "", other)
	if v["status"] != "finished" || jsonOf(v["result"]) != `{"error":{"exitCode":3,"stderr":"it broke\n"}}` {
		t.Errorf("--on-error result: %v", v)
	}
}

// TestCLIWorkReasonOverTheLimit: on a queue whose maxItemBytes is smaller
// than a failed command's tails, the reason is refused as too_large; the
// task is still given back (or failed, with --on-error fail), without the
// reason, rather than left to wait out its lease and, with --on-error
// fail, be retried instead of failed.
func TestCLIWorkReasonOverTheLimit(t *testing.T) {
	t.Parallel()
	s := startRetry(t)
	noisy := `cat >/dev/null; seq 1 2000 >&2; exit 3` // 8893 bytes of stderr

	id := s.post("tight", "", `{"n":1}`)
	r := s.cli("", "work", "tight", "--once", "--exec", noisy)
	if r.code != 0 || !strings.Contains(r.stderr, "task "+id+" released in ") {
		t.Fatalf("work: exit %d, stderr %s", r.code, r.stderr)
	}
	if diff := cmp.Diff([]string{"posted", "claimed", "released"}, s.eventsOf(id)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}

	r = s.cli("", "work", "tight", "--once", "--on-error", "fail", "--exec", noisy)
	if r.code != 0 || !strings.Contains(r.stderr, "task "+id+" failed in ") {
		t.Fatalf("work --on-error fail: exit %d, stderr %s", r.code, r.stderr)
	}
	if v := s.view("tight", "", id); v["status"] != "failed" || v["error"] != "failed" || v["failure"] != nil {
		t.Errorf("failed task: %v", v)
	}
}

// TestCLIWorkDeadLetter: on a queue of maxAttempts 2, a command that keeps
// failing gets its task released after the first run and failed with error
// "attempts" after the second: a dead letter that keeps its reason.
func TestCLIWorkDeadLetter(t *testing.T) {
	t.Parallel()
	s := startRetry(t)
	id := s.post("dead", "", `{"n":1}`)
	for i, want := range []string{"released", "failed"} {
		r := s.cli("", "work", "dead", "--once", "--exec", failingCommand)
		if r.code != 0 || !strings.Contains(r.stderr, "task "+id+" "+want+" in ") {
			t.Fatalf("run %d: exit %d, stderr %s", i+1, r.code, r.stderr)
		}
	}
	v := s.view("dead", "", id)
	if v["status"] != "failed" || v["error"] != "attempts" || v["attempts"] != 2.0 {
		t.Errorf("dead letter: %v", v)
	}
	if got := jsonOf(v["failure"]); got != `{"exitCode":3,"stderr":"it broke\n","stdout":"partial\n"}` {
		t.Errorf("dead letter's failure = %s", got)
	}
	claims := 0
	for _, e := range s.eventsOf(id) {
		if e == "claimed" {
			claims++
		}
	}
	if claims != 2 {
		t.Errorf("claimed %d times, want 2: %v", claims, s.eventsOf(id))
	}
	// Nothing left to claim: the dead letter is not handed out a third time.
	if r := s.do("POST", "/dead/claim", "", `{"worker":"w"}`); r.Status != 204 {
		t.Errorf("claim after the dead letter: %d %s", r.Status, r.Body)
	}
}

// TestCLIWorkHeartbeatsKeepTheLease: a command running 3 s on a queue with
// a one-second lease finishes under its first claim: the worker's
// heartbeats kept the lease, so the sweep never re-queued it.
func TestCLIWorkHeartbeatsKeepTheLease(t *testing.T) {
	t.Parallel()
	s := startRetry(t)
	id := s.post("slow", "", `{"n":1}`)
	r := s.cli("", "work", "slow", "--once", "--exec", `cat >/dev/null; sleep 3; echo '{"ok":true}'`)
	if r.code != 0 || !strings.Contains(r.stderr, "task "+id+" finished in 3") {
		t.Fatalf("work: exit %d, stderr %s", r.code, r.stderr)
	}
	v := s.view("slow", "", id)
	if v["status"] != "finished" || v["attempts"] != 1.0 || jsonOf(v["result"]) != `{"ok":true}` {
		t.Errorf("long task: %v", v)
	}
	if events := s.eventsOf(id); len(events) < 3 || !cmp.Equal([]string{"posted", "claimed", "result"}, events[:3]) {
		t.Errorf("events %v, want posted, claimed, result (no requeue)", events)
	}
}

// TestCLIPostDelayAndPriority: post --delay, --not-before and --priority
// show in the status view; a delayed task is not claimed, and a higher
// priority is claimed first.
func TestCLIPostDelayAndPriority(t *testing.T) {
	t.Parallel()
	s := startRetry(t)
	postID := func(args ...string) string {
		t.Helper()
		r := s.cli("", append([]string{"post", "flaky"}, args...)...)
		id := strings.TrimSpace(r.stdout)
		if r.code != 0 || !idPattern.MatchString(id) {
			t.Fatalf("post %v: exit %d, stdout %q, stderr %q", args, r.code, r.stdout, r.stderr)
		}
		return id
	}
	before := time.Now().UnixMilli()
	delayed := postID(`{"n":1}`, "--delay", "30", "--priority", "7")
	after := time.Now().UnixMilli()
	at := time.Now().Add(time.Hour).UnixMilli()
	later := postID(`{"n":2}`, "--not-before", strconv.FormatInt(at, 10))
	low := postID(`{"n":3}`)
	high := postID(`{"n":4}`, "--priority", "5")

	v := s.view("flaky", "", delayed)
	nb, _ := v["notBefore"].(float64)
	if v["priority"] != 7.0 || int64(nb) < before+30000 || int64(nb) > after+30000 {
		t.Errorf("delayed task: %v, want priority 7 and notBefore 30 s after the post", v)
	}
	if v := s.view("flaky", "", later); v["notBefore"] != float64(at) {
		t.Errorf("--not-before task: %v, want notBefore %d", v, at)
	}
	if v := s.view("flaky", "", low); v["priority"] != nil || v["notBefore"] != nil {
		t.Errorf("a plain post shows %v", v)
	}

	var claimed []string
	for range 3 {
		r := s.do("POST", "/flaky/claim", "", `{"worker":"w"}`)
		if r.Status == 204 {
			break
		}
		claimed = append(claimed, r.JSON(t)["id"].(string))
	}
	if diff := cmp.Diff([]string{high, low}, claimed); diff != "" {
		t.Errorf("claim order (-want +got):\n%s", diff)
	}

	if r := s.cli("", "post", "flaky", "{}", "--delay", "5", "--not-before", "1"); r.code != 2 {
		t.Errorf("post with --delay and --not-before: exit %d, stderr %s", r.code, r.stderr)
	}
	if r := s.cli("", "post", "flaky", "{}", "--priority", "5000"); r.code != 1 || !strings.Contains(r.stderr, "invalid_request (400)") {
		t.Errorf("post --priority 5000: exit %d, stderr %s", r.code, r.stderr)
	}
}

// TestCLIReleaseAndFail: the release and fail commands, as the lease
// holder and as someone else, with their answers on stdout.
func TestCLIReleaseAndFail(t *testing.T) {
	t.Parallel()
	s := startRetry(t)
	first := s.post("flaky", "", `{"n":1}`)
	second := s.post("flaky", "", `{"n":2}`)
	claim := func() string {
		t.Helper()
		r := s.do("POST", "/flaky/claim", "", `{"worker":"w1"}`)
		if r.Status != 200 {
			t.Fatalf("claim: %d %s", r.Status, r.Body)
		}
		return r.JSON(t)["id"].(string)
	}
	if id := claim(); id != first {
		t.Fatalf("claimed %s, want %s", id, first)
	}

	r := s.cli("", "release", "flaky", first, "--worker", "someone-else")
	if r.code != 1 || strings.TrimSpace(r.stdout) != `{"accepted":false,"status":"processing"}` {
		t.Errorf("release by another worker: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := s.cli("", "release", "flaky", first, "--reason", "{nope"); r.code != 2 {
		t.Errorf("release with a bad --reason: exit %d", r.code)
	}
	before := time.Now().UnixMilli()
	r = s.cli("", "release", "flaky", first, "--worker", "w1", "--delay", "60", "--reason", `{"why":"later"}`)
	if r.code != 0 || strings.TrimSpace(r.stdout) != `{"accepted":true,"status":"pending"}` {
		t.Fatalf("release: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	v := s.view("flaky", "", first)
	nb, _ := v["notBefore"].(float64)
	if v["status"] != "pending" || jsonOf(v["failure"]) != `{"why":"later"}` || int64(nb) < before+60000 {
		t.Errorf("released task: %v", v)
	}

	// The released task waits out its delay: the next claim takes the other.
	if id := claim(); id != second {
		t.Fatalf("claimed %s after the release, want %s", id, second)
	}
	r = s.cli("", "fail", "flaky", second, "--worker", "w1", "--reason", `{"why":"bad"}`)
	if r.code != 0 || strings.TrimSpace(r.stdout) != `{"accepted":true}` {
		t.Fatalf("fail: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	v = s.view("flaky", "", second)
	if v["status"] != "failed" || v["error"] != "failed" || jsonOf(v["failure"]) != `{"why":"bad"}` {
		t.Errorf("failed task: %v", v)
	}
	r = s.cli("", "fail", "flaky", second)
	if r.code != 1 || strings.TrimSpace(r.stdout) != `{"accepted":false,"status":"failed"}` || !strings.Contains(r.stderr, "not accepted") {
		t.Errorf("fail of a failed task: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if diff := cmp.Diff([]string{"posted", "claimed", "released"}, s.eventsOf(first)); diff != "" {
		t.Errorf("events of the released task (-want +got):\n%s", diff)
	}
}

// TestClientWorkerGiveBackFailAndHeartbeat: the Go client's Worker against
// the real server: a handler's Release gives the task back (and it runs
// again), a Failure fails it, and a handler outliving a one-second lease
// keeps it through heartbeats.
func TestClientWorkerGiveBackFailAndHeartbeat(t *testing.T) {
	t.Parallel()
	s := startRetry(t)
	c := s.clientAs("")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	giveBack, err := c.Post(ctx, "slow", map[string]string{"do": "release"})
	if err != nil {
		t.Fatal(err)
	}
	doomed, _ := c.Post(ctx, "slow", map[string]string{"do": "fail"})
	long, _ := c.Post(ctx, "slow", map[string]string{"do": "sleep"})

	outcomes := map[string][]string{}
	w := &client.Worker{
		Client: c, Queue: "slow", Name: "go-1", Limit: 4,
		Handler: func(ctx context.Context, task *client.Task) (any, error) {
			switch {
			case task.ID == giveBack && task.Attempts == 1:
				return nil, client.Release{Reason: "try again"}
			case task.ID == doomed:
				return nil, &client.Failure{Reason: map[string]string{"why": "doomed"}}
			case task.ID == long:
				time.Sleep(2500 * time.Millisecond)
			}
			return map[string]int{"attempt": task.Attempts}, nil
		},
		OnOutcome: func(o client.Outcome) {
			outcomes[o.Task.ID] = append(outcomes[o.Task.ID], o.Sent+" "+o.Ack.Status+" "+errText(o.Err))
		},
	}
	if err := w.Run(ctx); err != nil {
		t.Fatalf("Run = %v", err)
	}
	want := map[string][]string{
		giveBack: {"release pending ", "result  "},
		doomed:   {"fail  "},
		long:     {"result  "},
	}
	if diff := cmp.Diff(want, outcomes); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	if v, _ := c.Status(ctx, "slow", giveBack); v.Status != "finished" || v.Attempts != 2 || string(v.Failure) != `"try again"` {
		t.Errorf("the given-back task: %+v", v)
	}
	if v, _ := c.Status(ctx, "slow", doomed); v.Status != "failed" || v.Error == nil || *v.Error != "failed" {
		t.Errorf("the failed task: %+v", v)
	}
	if v, _ := c.Status(ctx, "slow", long); v.Status != "finished" || v.Attempts != 1 {
		t.Errorf("the long task: %+v (attempts 1: the heartbeats kept its lease)", v)
	}
	for _, e := range s.eventsOf(long) {
		if e == "requeue" {
			t.Errorf("the long task was re-queued: %v", s.eventsOf(long))
		}
	}
}

func errText(err error) string {
	if err == nil || errors.Is(err, context.Canceled) {
		return ""
	}
	return err.Error()
}

// TestCLIReleaseRefusesBadDelays: a --delay that is not a number of
// seconds the server takes (NaN, infinite, past a year, or so large that
// it does not fit a time.Duration) is a wrong command line, exit 2, and
// the task stays with its worker: it is never released at once, with no
// delay at all.
func TestCLIReleaseRefusesBadDelays(t *testing.T) {
	t.Parallel()
	s := startRetry(t)
	id := s.post("flaky", "", `{"n":1}`)
	if r := s.do("POST", "/flaky/claim", "", `{"worker":"w1"}`); r.Status != 200 || r.JSON(t)["id"] != id {
		t.Fatalf("claim: %d %s", r.Status, r.Body)
	}
	for _, delay := range []string{"1e10", "NaN", "+Inf", "31536001"} {
		r := s.cli("", "release", "flaky", id, "--worker", "w1", "--delay", delay)
		if r.code != 2 || !strings.Contains(r.stderr, "--delay") {
			t.Errorf("release --delay %s: exit %d, stdout %q, stderr %q", delay, r.code, r.stdout, r.stderr)
		}
		if v := s.view("flaky", "", id); v["status"] != "processing" {
			t.Fatalf("after release --delay %s the task is %v, notBefore %v", delay, v["status"], v["notBefore"])
		}
	}
}
