package e2e

import (
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestKillNineKeepsAcknowledgedWrites posts and finishes tasks under
// --sync always, kills the server with SIGKILL the moment the last answer
// arrives, and restarts it: every acknowledged post and result is there.
func TestKillNineKeepsAcknowledgedWrites(t *testing.T) {
	t.Parallel()
	d := newDirs(t)
	s := start(t, d, "--sync", "always")
	const n = 30
	var mu sync.Mutex
	posted := map[string]bool{}
	finished := map[string]bool{}
	var wg sync.WaitGroup
	for p := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n / 3 {
				id := s.post("resize", aliceToken, fmt.Sprintf(`{"url":"p%d-%d"}`, p, i))
				mu.Lock()
				posted[id] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for range n / 2 {
		r := s.do("POST", "/resize/claim", boxToken, `{"worker":"w"}`)
		id := r.JSON(t)["id"].(string)
		r = s.do("POST", "/resize/"+id+"/result", boxToken, `{"worker":"w","result":{"ok":true}}`)
		if r.JSON(t)["accepted"] != true {
			t.Fatalf("result %s not accepted: %s", id, r.Body)
		}
		finished[id] = true
	}
	s.kill()

	s = start(t, d, "--sync", "always")
	for id := range posted {
		view := s.do("GET", "/resize/"+id, aliceToken, "")
		if view.Status != http.StatusOK {
			t.Errorf("task %s lost after kill -9: %d %s", id, view.Status, view.Body)
			continue
		}
		status := view.JSON(t)["status"]
		if finished[id] && status != "finished" {
			t.Errorf("finished task %s came back %v", id, status)
		}
		if !finished[id] && status != "pending" {
			t.Errorf("pending task %s came back %v", id, status)
		}
	}
	info := s.do("GET", "/resize", aliceToken, "").JSON(t)["counts"].(map[string]any)
	if info["pending"] != float64(n-n/2) || info["done"] != float64(n/2) {
		t.Errorf("counts after restart = %v", info)
	}
}

// TestRestartKeepsLeasesAndRecoversFiles: a processing task keeps its lease
// over a clean restart; a task left in two directories, a temp file and a
// corrupt file are reconciled at start-up.
func TestRestartKeepsLeasesAndRecoversFiles(t *testing.T) {
	t.Parallel()
	d := newDirs(t)
	s := start(t, d)
	leased := s.post("resize", aliceToken, `{"url":"a"}`)
	claim := s.do("POST", "/resize/claim", boxToken, `{"worker":"w"}`).JSON(t)
	done := s.post("resize", aliceToken, `{"url":"b"}`)
	s.do("POST", "/resize/claim", boxToken, `{"worker":"w"}`)
	s.do("POST", "/resize/"+done+"/result", boxToken, `{"worker":"w","result":{}}`)
	s.stop()

	// Simulate a crash in the middle of a move: an old copy of the finished
	// task back in pending/, a temp file, and a file that is not JSON.
	old := `{"id":"` + done + `","host":"` + host + `","queue":"resize","status":"pending","item":{"url":"b"},"postedBy":"alice","postedAt":1,"updatedAt":1,"attempts":0,"lease":null,"progress":null,"result":null,"error":null,"finishedAt":null,"fetchedAt":null}`
	writeFile(t, s.taskFile("resize", "pending", done), old)
	writeFile(t, filepath.Join(d.items, host, "resize", "pending", ".0123456789abcdef.json.tmp-1"), "{half")
	corrupt := "fedcba9876543210"
	writeFile(t, s.taskFile("resize", "pending", corrupt), "not json")

	s = start(t, d)
	view := s.do("GET", "/resize/"+leased, aliceToken, "").JSON(t)
	if view["status"] != "processing" {
		t.Errorf("leased task after restart: %v", view)
	}
	r := s.do("POST", "/resize/"+leased+"/progress", boxToken, `{"worker":"w","progress":{}}`)
	if r.JSON(t)["accepted"] != true {
		t.Errorf("lease holder's progress after restart refused: %s (claim was %v)", r.Body, claim)
	}
	if exists(s.taskFile("resize", "pending", done)) || !exists(s.taskFile("resize", "done", done)) {
		t.Errorf("task in two directories was not reconciled to done/")
	}
	if got := s.do("GET", "/resize/"+done, aliceToken, "").JSON(t)["status"]; got != "finished" {
		t.Errorf("reconciled task status = %v", got)
	}
	entries, _ := os.ReadDir(filepath.Join(d.items, host, "resize", "pending"))
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("temp file %s left after start-up", e.Name())
		}
	}
	if !exists(filepath.Join(d.items, host, "resize", "corrupt", corrupt+".json")) {
		t.Errorf("corrupt file not moved to corrupt/")
	}
	var failed bool
	for _, ev := range s.events() {
		if ev["id"] == corrupt && ev["event"] == "failed" && ev["status"] == "failed" {
			failed = true
		}
	}
	if !failed {
		t.Errorf("no failed event for the corrupt file")
	}
}

// TestSecondServerOnSameItemsIsRefused: one process per items folder.
func TestSecondServerOnSameItemsIsRefused(t *testing.T) {
	t.Parallel()
	d := newDirs(t)
	first := start(t, d)
	second, err := launch(t, d)
	if err == nil {
		t.Fatalf("second server started on the same items folder")
	}
	if !strings.Contains(second.Stderr(), "in use") {
		t.Errorf("second server's error does not say why: %s", second.Stderr())
	}
	if code := second.cmd.ProcessState.ExitCode(); code == 0 {
		t.Errorf("second server exited 0")
	}
	// The first one is unharmed.
	first.post("resize", aliceToken, `{"url":"still here"}`)
	// And after a clean stop the lock is released.
	first.stop()
	start(t, d)
}

// TestPathTraversalCreatesNothing sends hostile hosts, queues and ids and
// checks that no file appears outside the data folders.
func TestPathTraversalCreatesNothing(t *testing.T) {
	t.Parallel()
	d := newDirs(t)
	root := filepath.Dir(d.items)
	s := start(t, d)
	before := tree(t, root)
	hostile := []struct{ method, path, host string }{
		{"POST", "/..%2f..%2fetc", host},
		{"POST", "/../../etc", host},
		{"POST", "/resize/..%2f..%2fx/result", host},
		{"GET", "/resize/..%2F..%2F..%2Fetc%2Fpasswd", host},
		{"POST", "/resize/%2e%2e/progress", host},
		{"POST", "/public", "../../evil"},
		{"POST", "/public", "..%2f..%2fevil"},
		{"POST", "/public", "task.example.com/../../evil"},
		{"POST", "/public/claim", ".."},
		{"GET", "/public/0123456789abcdef%00/watch", host},
		{"POST", "/_logs/../../x", host},
	}
	for _, h := range hostile {
		r := s.doHost(h.method, h.path, h.host, aliceToken, `{"url":"x","result":{}}`)
		if r.Status < 400 {
			t.Errorf("%s %s (host %q) answered %d", h.method, h.path, h.host, r.Status)
		}
	}
	after := tree(t, root)
	for path := range after {
		if !before[path] && !strings.HasPrefix(path, "items/") && !strings.HasPrefix(path, "logs/") {
			t.Errorf("hostile requests created %s", path)
		}
	}
	for path := range after {
		if strings.Contains(path, "evil") || strings.Contains(path, "etc") {
			t.Errorf("hostile name reached the disc: %s", path)
		}
	}
}

// tree lists every path under root, relative to it.
func tree(t *testing.T, root string) map[string]bool {
	t.Helper()
	paths := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		paths[filepath.ToSlash(rel)] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return paths
}

// TestTimersOverHTTP: a lapsed lease re-queues, the late result still
// counts; a task nobody finishes times out and refuses a later result; a
// finished task is cleaned after retention. The public queue has a 1 s
// lease, a 3 s queue timeout and 1 s retention.
func TestTimersOverHTTP(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t))

	slow := s.post("public", "", `{"job":"slow"}`)
	s.do("POST", "/public/claim", "", `{"worker":"slowpoke"}`)
	eventually(t, "the lapsed lease to re-queue", func() bool {
		return s.do("GET", "/public/"+slow, "", "").JSON(t)["status"] == "pending"
	})
	r := s.do("POST", "/public/"+slow+"/result", "", `{"worker":"slowpoke","result":"late but good"}`)
	if r.JSON(t)["accepted"] != true {
		t.Fatalf("late result refused: %s", r.Body)
	}

	never := s.post("public", "", `{"job":"never"}`)
	eventually(t, "the queue timeout", func() bool {
		return s.do("GET", "/public/"+never, "", "").JSON(t)["status"] == "failed"
	})
	view := s.do("GET", "/public/"+never, "", "").JSON(t)
	if view["error"] != "timeout" {
		t.Errorf("timed-out view = %v", view)
	}
	if r := s.do("POST", "/public/"+never+"/result", "", `{"result":1}`); r.JSON(t)["accepted"] != false {
		t.Errorf("result after timeout: %s", r.Body)
	}
	// The file goes first, then the cleaned line: wait for both.
	eventually(t, "retention to clean both tasks", func() bool {
		gone := !exists(s.taskFile("public", "done", slow)) && !exists(s.taskFile("public", "done", never))
		logged := slices.Contains(s.eventsOf(slow), "cleaned") && slices.Contains(s.eventsOf(never), "cleaned")
		return gone && logged
	})
	want := map[string][]string{
		slow:  {"posted", "claimed", "requeue", "result", "cleaned"},
		never: {"posted", "timeout", "fetched", "cleaned"},
	}
	for id, events := range want {
		got := s.eventsOf(id)
		if strings.Join(got, ",") != strings.Join(events, ",") {
			t.Errorf("events of %s = %v, want %v", id, got, events)
		}
	}
	if r := s.do("GET", "/public/"+slow, "", ""); r.Status != 404 {
		t.Errorf("cleaned task still answers %d", r.Status)
	}
}

// TestLiveReload: a queue file added, changed and removed takes effect
// without a restart; the removed queue's tasks come back with the file.
func TestLiveReload(t *testing.T) {
	t.Parallel()
	d := newDirs(t)
	s := start(t, d)
	queueFile := filepath.Join(d.hosts, host, "taskhoster-queues", "fresh.json")
	writeFile(t, queueFile, `{"item":{"type":"object"},"access":{"post":"public","status":"public"}}`)
	eventually(t, "the new queue to be served", func() bool {
		return s.do("GET", "/fresh", "", "").Status == 200
	})
	id := s.post("fresh", "", `{"a":1}`)
	writeFile(t, queueFile, `{"item":{"type":"array"},"access":{"post":"public","status":"public"}}`)
	eventually(t, "the changed schema", func() bool {
		return s.do("POST", "/fresh", "", `{"a":1}`).Status == 422
	})
	if err := os.Remove(queueFile); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the removed queue to answer 404", func() bool {
		return s.do("GET", "/fresh/"+id, "", "").Status == 404
	})
	writeFile(t, queueFile, `{"item":{},"access":{"status":"public"}}`)
	eventually(t, "the queue and its task to come back", func() bool {
		return s.do("GET", "/fresh/"+id, "", "").Status == 200
	})
	// An invalid file is refused with its path and reason, and the rest stays up.
	writeFile(t, filepath.Join(d.hosts, host, "taskhoster-queues", "broken.json"), `{"item":{},"settings":{"leaseSeconds":0}}`)
	eventually(t, "the broken file to be reported", func() bool {
		return strings.Contains(s.Stderr(), "broken.json") && strings.Contains(s.Stderr(), "/settings/leaseSeconds")
	})
	if r := s.do("GET", "/broken", "", ""); r.Status != 404 {
		t.Errorf("invalid queue served: %d", r.Status)
	}
	if r := s.do("GET", "/fresh/"+id, "", ""); r.Status != 200 {
		t.Errorf("valid queue down after a broken file: %d", r.Status)
	}
}

// TestAdminAndShutdown: metrics count what happened, health and readiness
// answer, and SIGTERM stops cleanly.
func TestAdminAndShutdown(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t))
	id := s.post("public", "", `{}`)
	s.do("POST", "/public/claim", "", ``)
	s.do("POST", "/public/"+id+"/result", "", `{"result":1}`)
	s.do("POST", "/public/"+id+"/result", "", `{"result":2}`)
	get := func(path string) (int, string) {
		resp, err := http.Get(s.admin + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode, readAll(t, resp)
	}
	code, body := get("/metrics")
	for _, want := range []string{
		`taskhoster_posts_total{host="task.example.com",queue="public"} 1`,
		`taskhoster_claims_total{host="task.example.com",queue="public"} 1`,
		`taskhoster_results_total{host="task.example.com",outcome="accepted",queue="public"} 1`,
		`taskhoster_results_total{host="task.example.com",outcome="refused",queue="public"} 1`,
		`taskhoster_queue_tasks{host="task.example.com",queue="public",state="finished"} 1`,
		`taskhoster_request_duration_seconds_count`,
	} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// Under --sync always the post and the accepted result were flushed.
	if n := metricValue(body, "taskhoster_flush_duration_seconds_count"); n < 1 {
		t.Errorf("flushes counted: %v, want at least one", n)
	}
	if n := metricValue(body, "taskhoster_flush_callers_sum"); n < 2 {
		t.Errorf("writes the flushes served: %v, want at least the post and the result", n)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("healthz %d", code)
	}
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("readyz %d", code)
	}
	s.stop()
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// metricValue is the value of the metric line named name (without labels)
// in a Prometheus text exposition, or -1 if there is none.
func metricValue(body, name string) float64 {
	for line := range strings.SplitSeq(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// TestJournalRepairsWhatAPowerLossTook: under --sync always every write
// since start-up is in the journal. The server is killed, and then the
// disc is made to look as a power loss could leave it, had none of those
// writes' data reached it: every task file empty, in the directory of its
// first state, and the event log empty. The restart, as the first after a
// reboot, replays the journal:
// every acknowledged post and result is back, with its event lines, each
// once and at its old place in the day file.
func TestJournalRepairsWhatAPowerLossTook(t *testing.T) {
	t.Parallel()
	d := newDirs(t)
	s := start(t, d, "--sync", "always")
	posted := map[string]bool{}
	for i := range 12 {
		posted[s.post("resize", aliceToken, fmt.Sprintf(`{"url":"u%d"}`, i))] = false
	}
	for range 6 {
		id := s.do("POST", "/resize/claim", boxToken, `{"worker":"w"}`).JSON(t)["id"].(string)
		if r := s.do("POST", "/resize/"+id+"/result", boxToken, `{"worker":"w","result":{"ok":true}}`); r.JSON(t)["accepted"] != true {
			t.Fatalf("result %s: %s", id, r.Body)
		}
		posted[id] = true
	}
	days, _ := filepath.Glob(filepath.Join(d.logs, "tasks", "*.jsonl"))
	if len(days) != 1 {
		t.Fatalf("day files: %v", days)
	}
	logBefore, err := os.ReadFile(days[0])
	if err != nil {
		t.Fatal(err)
	}
	s.kill()

	for id := range posted {
		for _, state := range []string{"pending", "processing", "done"} {
			_ = os.Remove(s.taskFile("resize", state, id))
		}
		writeFile(t, s.taskFile("resize", "pending", id), "")
	}
	if err := os.Truncate(days[0], 0); err != nil {
		t.Fatal(err)
	}

	s = startAfterReboot(t, d, "--sync", "always")
	for id, finished := range posted {
		want := "pending"
		if finished {
			want = "finished"
		}
		if got := s.do("GET", "/resize/"+id, aliceToken, "").JSON(t)["status"]; got != want {
			t.Errorf("task %s after the power loss: status %v, want %s", id, got, want)
		}
		if finished && exists(s.taskFile("resize", "pending", id)) {
			t.Errorf("finished task %s also left in pending/", id)
		}
	}
	logAfter, err := os.ReadFile(days[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(logAfter), string(logBefore)) {
		t.Errorf("the day file after replay does not begin with its lines before the crash:\nbefore:\n%s\nafter:\n%s", logBefore, logAfter)
	}
	if got := strings.Count(string(logAfter), `"event":"result"`); got != 6 {
		t.Errorf("%d result lines after replay, want 6", got)
	}
	if strings.Contains(s.Stderr(), "corrupt") {
		t.Errorf("start-up found corrupt files after replay:\n%s", s.Stderr())
	}
}

// TestSyncNoneReplaysAndRemovesALeftoverJournal: a run under --sync none
// keeps no journal, but one left by a crashed run under --sync always is
// replayed first and then removed, so that no later run replays its old
// records over newer writes.
func TestSyncNoneReplaysAndRemovesALeftoverJournal(t *testing.T) {
	t.Parallel()
	d := newDirs(t)
	s := start(t, d, "--sync", "always")
	id := s.post("resize", aliceToken, `{"url":"kept"}`)
	s.kill()
	writeFile(t, s.taskFile("resize", "pending", id), "") // its data lost

	s = startAfterReboot(t, d, "--sync", "none")
	if got := s.do("GET", "/resize/"+id, aliceToken, "").JSON(t)["status"]; got != "pending" {
		t.Errorf("task after replay under --sync none: %v", got)
	}
	if exists(filepath.Join(d.items, ".journal")) {
		t.Error("the journal is still there under --sync none")
	}
	// A change under --sync none, then a run under --sync always: the old
	// records are gone, so the task stays finished.
	claimed := s.do("POST", "/resize/claim", boxToken, `{"worker":"w"}`).JSON(t)["id"]
	s.do("POST", "/resize/"+id+"/result", boxToken, `{"worker":"w","result":{}}`)
	s.stop()
	s = start(t, d, "--sync", "always")
	if got := s.do("GET", "/resize/"+id, aliceToken, "").JSON(t)["status"]; claimed != id || got != "finished" {
		t.Errorf("task claimed as %v, then %v after a run under --sync always", claimed, got)
	}
}

// TestKillNineWithoutRebootReplaysNothing: after a kill in the same boot
// the files are as new as the journal or newer (a change whose record no
// flush had committed yet), so the restart must not replay: older records
// would undo the newer change. Here the newer change is made by hand after
// the kill: the task file gains a progress the journal never saw.
func TestKillNineWithoutRebootReplaysNothing(t *testing.T) {
	t.Parallel()
	d := newDirs(t)
	s := start(t, d, "--sync", "always")
	id := s.post("resize", aliceToken, `{"url":"a"}`)
	if got := s.do("POST", "/resize/claim", boxToken, `{"worker":"w"}`).JSON(t)["id"]; got != id {
		t.Fatalf("claimed %v", got)
	}
	s.post("resize", aliceToken, `{"url":"b"}`) // the claim's record is committed already; so is this
	s.kill()
	path := s.taskFile("resize", "processing", id)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	newer := strings.Replace(string(data), `"progress":null`, `"progress":{"pct":99}`, 1)
	if newer == string(data) {
		t.Fatalf("no progress field in %s", data)
	}
	writeFile(t, path, newer)

	s = start(t, d, "--sync", "always")
	if got, _ := os.ReadFile(path); string(got) != newer {
		t.Errorf("the restart rewrote the task file from the journal:\n%s", got)
	}
	if strings.Contains(s.Stderr(), "replayed the journal") {
		t.Errorf("the journal was replayed after a kill without a reboot:\n%s", s.Stderr())
	}
}

// TestAClosedSocketsTasksShareCommits: under --sync always a move back is
// committed before it returns; a worker socket that closes holding many
// tasks moves them back side by side, so they share a few commits rather
// than wait for one each (the commits /metrics counts).
func TestAClosedSocketsTasksShareCommits(t *testing.T) {
	t.Parallel()
	const tasks = 64
	s := start(t, newDirs(t), "--sweep", "1h") // no sweep's commit in between
	k := s.dial("/resize/work?worker=box-1", boxToken)
	for i := range tasks {
		s.post("resize", aliceToken, fmt.Sprintf(`{"url":"%d"}`, i))
		k.claimTask(i + 1)
	}
	const pending = `taskhoster_queue_tasks{host="task.example.com",queue="resize",state="pending"}`
	before := metricValue(s.metrics(), "taskhoster_flush_duration_seconds_count")
	_ = k.c.Close()
	var body string
	eventually(t, "every task to be pending again", func() bool {
		body = s.metrics()
		return metricValue(body, pending) == tasks
	})
	commits := metricValue(body, "taskhoster_flush_duration_seconds_count") - before
	t.Logf("%v commits moved %d tasks back", commits, tasks)
	if commits < 1 || commits >= tasks*3/4 { // one after another: one each
		t.Errorf("%v commits to move %d tasks back, want them to share a few", commits, tasks)
	}
}

// TestWhatReadersAreShownIsCommitted: a progress report is answered without
// a commit of its own, so its change waits on disc for the next one; a
// producer's status read, and the log API's lines, show it only once a
// commit holds it (the commits /metrics counts: one each, none when
// nothing waits for one). A client shown a change a power loss then took
// away would see a task finish twice, and a log mirror would keep a line
// the server no longer has.
func TestWhatReadersAreShownIsCommitted(t *testing.T) {
	t.Parallel()
	s := start(t, newDirs(t), "--sync", "always", "--sweep", "1h") // no sweep's commit in between
	id := s.post("resize", aliceToken, `{"url":"a"}`)
	if r := s.do("POST", "/resize/claim", boxToken, `{"worker":"box-1"}`); r.Status != http.StatusOK {
		t.Fatalf("claim: %d %s", r.Status, r.Body)
	}
	commits := func() float64 { return metricValue(s.metrics(), "taskhoster_flush_duration_seconds_count") }
	report := func(percent int) {
		t.Helper()
		r := s.do("POST", "/resize/"+id+"/progress", boxToken, fmt.Sprintf(`{"worker":"box-1","progress":{"percent":%d}}`, percent))
		if r.Status != http.StatusOK || r.JSON(t)["accepted"] != true {
			t.Fatalf("progress: %d %s", r.Status, r.Body)
		}
	}
	shows := func(what string, read func() bool) {
		t.Helper()
		before := commits()
		if !read() {
			t.Fatalf("%s does not show the report", what)
		}
		if n := commits() - before; n != 1 {
			t.Errorf("%s took %v commits, want the one that holds the report", what, n)
		}
		// Nothing waits for a commit now, once the flush loop has ended
		// (a moment after it answered the read): a read takes none.
		for try := 1; ; try++ {
			before = commits()
			if !read() {
				t.Fatalf("%s again does not show the report", what)
			}
			n := commits() - before
			if n == 0 {
				break
			}
			if try == 3 {
				t.Errorf("%s again took %v commits, three times; want none: nothing waited for one", what, n)
				break
			}
		}
	}

	report(40)
	shows("a status read", func() bool {
		r := s.do("GET", "/resize/"+id, aliceToken, "")
		return r.Status == http.StatusOK && strings.Contains(string(r.Body), `"progress":{"percent":40}`)
	})
	report(80)
	today := time.Now().UTC().Format(time.DateOnly)
	shows("a read of the log's lines", func() bool {
		r := s.do("GET", "/_logs/tasks/"+today+"?offset=0", aliceToken, "")
		return r.Status == http.StatusOK && strings.Contains(string(r.Body), `"event":"progress"`) &&
			strings.Count(string(r.Body), `"event":"progress"`) == 2
	})
}
