package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/client"
)

// These tests drive SPEC §12 (operating queues) through the command-line
// client and the Go client. All but TestCLIManageUsage need the server's
// side of §12.

// cliManageQueues adds the queues of these tests to a hosts folder, before
// the server starts:
//   - ops: alice may post and manage, eve may post (and so cancel her own
//     tasks), box may work; status and work public.
//   - open: everything public, manage too.
func cliManageQueues(t *testing.T, d dirs) {
	t.Helper()
	queues := filepath.Join(d.hosts, host, "taskhoster-queues")
	writeFile(t, filepath.Join(queues, "ops.json"), `{
		"item": {"type": "object"}, "result": {"type": "object"},
		"settings": {"leaseSeconds": 60},
		"access": {"post": ["alice", "eve"], "status": "public", "work": "public", "manage": ["alice"]}
	}`)
	writeFile(t, filepath.Join(queues, "open.json"), `{
		"item": {"type": "object", "properties": {"width": {"type": "integer", "minimum": 1}}},
		"result": {"type": "object"},
		"settings": {"leaseSeconds": 60},
		"access": {"post": "public", "status": "public", "work": "public", "manage": "public"}
	}`)
}

func startCLIManage(t *testing.T) *server {
	t.Helper()
	d := newDirs(t)
	cliManageQueues(t, d)
	return start(t, d)
}

// lines splits a command's stdout into its lines.
func lines(out string) []string {
	out = strings.TrimSpace(out)
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}

// TestCLIManageUsage: wrong command lines exit 2 with the usage, each
// command's help lists its environment variables, and a batch with a line
// that is not JSON is refused before anything is sent. No server needed.
func TestCLIManageUsage(t *testing.T) {
	t.Parallel()
	s := &server{t: t, url: "http://127.0.0.1:1"} // nothing listens there
	for _, c := range []struct {
		stdin string
		args  []string
		want  string
	}{
		{"", []string{"cancel", "open"}, "Usage: taskhoster cancel QUEUE ID"},
		{"", []string{"retry"}, "Usage: taskhoster retry QUEUE ID"},
		{"", []string{"pause", "a", "b"}, "Usage: taskhoster pause QUEUE"},
		{"", []string{"resume"}, "Usage: taskhoster resume QUEUE"},
		{"", []string{"purge", "open", "--status", "pending"}, "--status must be failed or finished"},
		{"", []string{"tasks", "open", "--limit", "5000"}, "--limit must be 1 to 1000"},
		{"", []string{"tasks", "open", "--query", "{nope"}, "--query is not valid JSON"},
		{"{}\n", []string{"post", "open", "{}", "--batch"}, "--batch wants QUEUE alone"},
		{"{}\n", []string{"post", "open", "--batch", "--key", "k"}, "a batch takes no --key"},
	} {
		r := s.cli(c.stdin, c.args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
	for cmd, envs := range map[string][]string{
		"cancel": {"TASKHOSTER_SERVER", "TASKHOSTER_HOST", "TASKHOSTER_TOKEN"},
		"retry":  {"TASKHOSTER_TOKEN"},
		"pause":  {"TASKHOSTER_TOKEN"},
		"resume": {"TASKHOSTER_TOKEN"},
		"purge":  {"TASKHOSTER_TOKEN"},
		"tasks": {"TASKHOSTER_NEWEST", "TASKHOSTER_LIMIT", "TASKHOSTER_AFTER",
			"TASKHOSTER_QUERY", "TASKHOSTER_ALL"},
		"post": {"TASKHOSTER_PRIORITY"},
	} {
		r := s.cli("", cmd, "-h")
		if r.code != 0 {
			t.Errorf("%s -h: exit %d", cmd, r.code)
		}
		for _, env := range envs {
			if !strings.Contains(r.stderr, env) {
				t.Errorf("%s -h does not list %s:\n%s", cmd, env, r.stderr)
			}
		}
		// A flag that describes one call never comes from the environment
		// (a stray TASKHOSTER_STATUS would choose what purge deletes).
		for _, env := range []string{"TASKHOSTER_KEY", "TASKHOSTER_BATCH", "TASKHOSTER_STATUS"} {
			if strings.Contains(r.stderr, env) {
				t.Errorf("%s -h lists %s", cmd, env)
			}
		}
	}
	r := s.cli("{\"n\":1}\n\n{nope\n", "post", "open", "--batch")
	if r.code != 1 || !strings.Contains(r.stderr, "line 3 (item 1) is not valid JSON") || strings.Contains(r.stderr, "connection refused") {
		t.Errorf("batch with a bad line: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := s.cli("\n\n", "post", "open", "--batch"); r.code != 1 || !strings.Contains(r.stderr, "no items on stdin") {
		t.Errorf("empty batch: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := s.cli("", "help"); !strings.Contains(r.stdout, "taskhoster purge QUEUE --status failed|finished") {
		t.Errorf("usage lacks purge: %s", r.stdout)
	}
}

// TestCLICancelRetryPurge: cancel a pending and a processing task, cancel
// again (not accepted, exit 1), retry a cancelled one back to pending,
// retry a pending one (not_failed), purge the failed ones.
func TestCLICancelRetryPurge(t *testing.T) {
	t.Parallel()
	s := startCLIManage(t)
	pending := s.post("open", "", `{"n":1}`)
	held := s.post("open", "", `{"n":2}`)
	third := s.post("open", "", `{"n":3}`)
	if r := s.do("POST", "/open/claim", "", `{"worker":"w"}`); r.Status != 200 || r.JSON(t)["id"] != pending {
		t.Fatalf("claim: %d %s", r.Status, r.Body)
	}
	// The claimed one is the "processing" task from here on.
	held, pending = pending, held

	for _, id := range []string{pending, held} {
		r := s.cli("", "cancel", "open", id)
		if r.code != 0 || strings.TrimSpace(r.stdout) != `{"accepted":true,"status":"failed"}` {
			t.Fatalf("cancel %s: exit %d, stdout %q, stderr %q", id, r.code, r.stdout, r.stderr)
		}
		if v := s.view("open", "", id); v["status"] != "failed" || v["error"] != "cancelled" {
			t.Errorf("cancelled task: %v", v)
		}
	}
	// The holder's result comes too late.
	r0 := s.do("POST", "/open/"+held+"/result", "", `{"worker":"w","result":{}}`)
	if r0.Status != 200 || r0.JSON(t)["accepted"] != false {
		t.Errorf("result of a cancelled task: %d %s", r0.Status, r0.Body)
	}
	r := s.cli("", "cancel", "open", held)
	if r.code != 1 || strings.TrimSpace(r.stdout) != `{"accepted":false,"status":"failed"}` || !strings.Contains(r.stderr, "not accepted") {
		t.Errorf("cancel of a failed task: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}

	if r := s.cli("", "retry", "open", pending); r.code != 0 || r.stdout != "" {
		t.Fatalf("retry: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if v := s.view("open", "", pending); v["status"] != "pending" || v["attempts"] != 0.0 || v["error"] != nil {
		t.Errorf("retried task: %v", v)
	}
	if r := s.cli("", "retry", "open", third); r.code != 1 || !strings.Contains(r.stderr, "not_failed (409)") {
		t.Errorf("retry of a pending task: exit %d, stderr %q", r.code, r.stderr)
	}

	r = s.cli("", "purge", "open", "--status", "failed")
	if r.code != 0 || strings.TrimSpace(r.stdout) != "1" {
		t.Fatalf("purge: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := s.do("GET", "/open/"+held, "", ""); r.Status != 404 {
		t.Errorf("purged task: %d %s", r.Status, r.Body)
	}
	// (The views read above fetched the terminal tasks.)
	if diff := cmp.Diff([]string{"posted", "claimed", "cancelled", "fetched", "cleaned"}, s.eventsOf(held)); diff != "" {
		t.Errorf("events of the purged task (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"posted", "cancelled", "fetched", "retried"}, s.eventsOf(pending)); diff != "" {
		t.Errorf("events of the retried task (-want +got):\n%s", diff)
	}
	if r := s.cli("", "purge", "open", "--status", "finished"); r.code != 0 || strings.TrimSpace(r.stdout) != "0" {
		t.Errorf("purge of nothing: exit %d, stdout %q", r.code, r.stdout)
	}
}

// TestCLITasksPaging: pages by cursor, oldest and newest first, other
// statuses, a query over the item, and --all.
func TestCLITasksPaging(t *testing.T) {
	t.Parallel()
	s := startCLIManage(t)
	var ids []string
	for i := range 5 {
		ids = append(ids, s.post("open", "", fmt.Sprintf(`{"n":%d,"width":%d}`, i, i%2+1)))
	}
	page := func(args ...string) ([]string, string) {
		t.Helper()
		r := s.cli("", append([]string{"tasks", "open"}, args...)...)
		if r.code != 0 {
			t.Fatalf("tasks %v: exit %d, stderr %q", args, r.code, r.stderr)
		}
		var got []string
		for _, l := range lines(r.stdout) {
			var v map[string]any
			if err := json.Unmarshal([]byte(l), &v); err != nil {
				t.Fatalf("line %q: %v", l, err)
			}
			if v["status"] == nil || v["item"] == nil || v["postedAt"] == nil {
				t.Errorf("listed task lacks a field: %s", l)
			}
			// Posted anonymously: null, as the API says, not "".
			if postedBy, ok := v["postedBy"]; !ok || postedBy != nil {
				t.Errorf("an anonymous post listed with postedBy %#v, want null: %s", postedBy, l)
			}
			got = append(got, v["id"].(string))
		}
		next := ""
		for _, l := range lines(r.stderr) {
			if c, ok := strings.CutPrefix(l, "next: "); ok {
				next = c
			}
		}
		return got, next
	}

	first, next := page("--limit", "2")
	if diff := cmp.Diff(ids[:2], first); diff != "" || next == "" {
		t.Fatalf("first page (-want +got):\n%s; next %q", diff, next)
	}
	second, next := page("--limit", "2", "--after", next)
	if diff := cmp.Diff(ids[2:4], second); diff != "" || next == "" {
		t.Fatalf("second page (-want +got):\n%s; next %q", diff, next)
	}
	last, next := page("--limit", "2", "--after", next)
	if diff := cmp.Diff(ids[4:], last); diff != "" || next != "" {
		t.Errorf("last page (-want +got):\n%s; next %q", diff, next)
	}
	all, next := page("--limit", "2", "--all")
	if diff := cmp.Diff(ids, all); diff != "" || next != "" {
		t.Errorf("--all (-want +got):\n%s; next %q", diff, next)
	}
	newest, _ := page("--newest", "--limit", "2")
	if diff := cmp.Diff([]string{ids[4], ids[3]}, newest); diff != "" {
		t.Errorf("newest first (-want +got):\n%s", diff)
	}
	wide, _ := page("--query", `{"properties":{"width":{"const":2}}}`)
	if diff := cmp.Diff([]string{ids[1], ids[3]}, wide); diff != "" {
		t.Errorf("query (-want +got):\n%s", diff)
	}
	if r := s.do("POST", "/open/claim", "", `{"worker":"w"}`); r.Status != 200 {
		t.Fatalf("claim: %d %s", r.Status, r.Body)
	}
	processing, _ := page("--status", "processing")
	if diff := cmp.Diff(ids[:1], processing); diff != "" {
		t.Errorf("processing (-want +got):\n%s", diff)
	}
	if none, _ := page("--status", "finished"); len(none) != 0 {
		t.Errorf("finished: %v", none)
	}
}

// TestCLIPauseResume: a paused queue takes posts but claims find nothing;
// after resume they get the task.
func TestCLIPauseResume(t *testing.T) {
	t.Parallel()
	s := startCLIManage(t)
	if r := s.cli("", "pause", "open"); r.code != 0 || r.stdout != "" {
		t.Fatalf("pause: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := s.do("GET", "/open", "", ""); r.JSON(t)["paused"] != true {
		t.Errorf("queue info while paused: %s", r.Body)
	}
	r := s.cli("", "post", "open", `{"n":1}`)
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || !idPattern.MatchString(id) {
		t.Fatalf("post while paused: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := s.do("POST", "/open/claim", "", `{"worker":"w","wait":0.3}`); r.Status != 204 {
		t.Errorf("claim while paused: %d %s", r.Status, r.Body)
	}
	if r := s.cli("", "resume", "open"); r.code != 0 {
		t.Fatalf("resume: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := s.do("POST", "/open/claim", "", `{"worker":"w","wait":2}`); r.Status != 200 || r.JSON(t)["id"] != id {
		t.Errorf("claim after resume: %d %s", r.Status, r.Body)
	}
}

// TestCLIPostKeyAndBatch: the same key posts once (stderr says so the
// second time), another item with it is a conflict; a batch prints its ids
// in order, and a bad item refuses the whole batch naming its index.
func TestCLIPostKeyAndBatch(t *testing.T) {
	t.Parallel()
	s := startCLIManage(t)
	r := s.cli("", "post", "open", `{"n":1}`, "--key", "order-17")
	first := strings.TrimSpace(r.stdout)
	if r.code != 0 || !idPattern.MatchString(first) || r.stderr != "" {
		t.Fatalf("keyed post: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = s.cli("", "post", "open", `{"n":1}`, "--key", "order-17")
	if r.code != 0 || strings.TrimSpace(r.stdout) != first || !strings.Contains(r.stderr, "posted before") {
		t.Errorf("the same key again: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := s.cli("", "post", "open", `{"n":2}`, "--key", "order-17"); r.code != 1 || !strings.Contains(r.stderr, "idempotency_conflict (409)") {
		t.Errorf("the key with another item: exit %d, stderr %q", r.code, r.stderr)
	}

	r = s.cli("{\"n\":10}\n{\"n\":11}\n\n{\"n\":12}\n", "post", "open", "--batch", "--priority", "7")
	ids := lines(r.stdout)
	if r.code != 0 || len(ids) != 3 {
		t.Fatalf("batch: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	for i, id := range ids {
		v := s.view("open", "", id)
		if v["priority"] != 7.0 || v["status"] != "pending" {
			t.Errorf("batch task %d: %v", i, v)
		}
	}
	before := len(s.events())
	r = s.cli("{\"width\":1}\n{\"width\":0}\n", "post", "open", "--batch")
	if r.code != 1 || !strings.Contains(r.stderr, "invalid_item (422)") || !strings.Contains(r.stderr, "/items/1/width") || r.stdout != "" {
		t.Errorf("batch with a bad item: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if after := len(s.events()); after != before {
		t.Errorf("a refused batch logged %d events", after-before)
	}
}

// TestCLIManageAccess: manage is alice's on ops; eve may cancel the task
// she posted but nothing else; box (no access) and an unknown token are
// refused.
func TestCLIManageAccess(t *testing.T) {
	t.Parallel()
	s := startCLIManage(t)
	alices := s.post("ops", aliceToken, `{"n":1}`)
	eves := s.post("ops", eveToken, `{"n":2}`)
	unknown := "0000000000000000000000000000dead"
	for _, c := range []struct {
		name  string
		args  []string
		token string
		want  string // "" for success
	}{
		{"eve lists", []string{"tasks", "ops"}, eveToken, "(403)"},
		{"box pauses", []string{"pause", "ops"}, boxToken, "(403)"},
		{"unknown token purges", []string{"purge", "ops", "--status", "failed"}, unknown, "unauthorized (401)"},
		{"no token retries", []string{"retry", "ops", alices}, "", "(401)"},
		{"eve cancels alice's task", []string{"cancel", "ops", alices}, eveToken, "(403)"},
		{"eve cancels her own", []string{"cancel", "ops", eves}, eveToken, ""},
		{"alice lists", []string{"tasks", "ops", "--status", "failed"}, aliceToken, ""},
		{"alice retries", []string{"retry", "ops", eves}, aliceToken, ""},
		{"alice cancels eve's", []string{"cancel", "ops", eves}, aliceToken, ""},
		{"alice pauses", []string{"pause", "ops"}, aliceToken, ""},
		{"alice resumes", []string{"resume", "ops"}, aliceToken, ""},
	} {
		args := c.args
		if c.token != "" {
			args = append(args, "--token", c.token)
		}
		r := s.cli("", args...)
		switch {
		case c.want == "" && r.code != 0:
			t.Errorf("%s: exit %d, stderr %q", c.name, r.code, r.stderr)
		case c.want != "" && (r.code != 1 || !strings.Contains(r.stderr, c.want)):
			t.Errorf("%s: exit %d, stderr %q; want %s", c.name, r.code, r.stderr, c.want)
		}
	}
	if v := s.view("ops", "", alices); v["status"] != "pending" {
		t.Errorf("alice's task after the refused cancel: %v", v)
	}
}

// TestClientManage: the Go client against the real server: a Worker whose
// running task is cancelled sees its handler's context cancelled with
// ErrCancelled; ClaimMany takes several at once; Submit tells a keyed
// repeat from a new post; Tasks pages.
func TestClientManage(t *testing.T) {
	t.Parallel()
	s := startCLIManage(t)
	c := s.clientAs("")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	first, err := c.Submit(ctx, "open", map[string]int{"n": 1}, client.Key("k1"))
	if err != nil || !first.Created || first.Status != "pending" {
		t.Fatalf("Submit = %+v, %v", first, err)
	}
	again, err := c.Submit(ctx, "open", map[string]int{"n": 1}, client.Key("k1"))
	if err != nil || again.Created || again.ID != first.ID {
		t.Errorf("Submit again = %+v, %v; want %s, not created", again, err, first.ID)
	}

	ids, err := c.PostBatch(ctx, "open", []map[string]int{{"n": 2}, {"n": 3}, {"n": 4}})
	if err != nil || len(ids) != 3 {
		t.Fatalf("PostBatch = %v, %v", ids, err)
	}
	tasks, err := c.ClaimMany(ctx, "open", "many", nil, time.Second, 3)
	if err != nil {
		t.Fatal(err)
	}
	var claimed []string
	for _, task := range tasks {
		claimed = append(claimed, task.ID)
	}
	if diff := cmp.Diff([]string{first.ID, ids[0], ids[1]}, claimed); diff != "" {
		t.Errorf("ClaimMany (-want +got):\n%s", diff)
	}
	page, err := c.Tasks(ctx, "open", client.TaskQuery{Status: "processing", Limit: 2})
	if err != nil || len(page.Tasks) != 2 || page.Next == "" || page.Tasks[0].ID != first.ID || string(page.Tasks[0].Item) != `{"n":1}` {
		t.Errorf("Tasks = %+v, %v", page, err)
	}

	// The Worker: the last pending task runs until cancelled.
	started := make(chan string, 1)
	var outcome client.Outcome
	var cause error
	w := &client.Worker{
		Client: c, Queue: "open", Name: "go-1", Limit: 1,
		Handler: func(ctx context.Context, task *client.Task) (any, error) {
			started <- task.ID
			<-ctx.Done()
			cause = context.Cause(ctx)
			return map[string]bool{"late": true}, nil
		},
		OnOutcome: func(o client.Outcome) { outcome = o },
	}
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	var id string
	select {
	case id = <-started:
	case <-ctx.Done():
		t.Fatal("the handler did not start")
	}
	if id != ids[2] {
		t.Errorf("the Worker got %s, want %s", id, ids[2])
	}
	ack, err := c.Cancel(ctx, "open", id)
	if err != nil || !ack.Accepted || ack.Status != "failed" {
		t.Fatalf("Cancel = %+v, %v", ack, err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("Run = %v", err)
	}
	if !errors.Is(cause, client.ErrCancelled) || !errors.Is(outcome.Err, client.ErrCancelled) || outcome.Sent != "" {
		t.Errorf("cause %v, outcome %+v; want ErrCancelled and nothing sent", cause, outcome)
	}
	if v, _ := c.Status(ctx, "open", id); v.Status != "failed" || v.Error == nil || *v.Error != "cancelled" || (len(v.Result) > 0 && string(v.Result) != "null") {
		t.Errorf("the cancelled task: %+v", v)
	}
}
