package fsstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/adapters/fsstore"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
	"github.com/taskhoster/taskhoster/tests/contract"
)

const (
	host  = "task.example.com"
	queue = "resize"
	id    = "9f2c1a0b7d4e6f83"
)

var (
	epoch = time.UnixMilli(1751500000000)
	ref   = domain.QueueRef{Host: host, Queue: queue}
)

func keyOf(id string) domain.Key { return domain.Key{Host: host, Queue: queue, ID: id} }

// taskID is the n-th test id.
func taskID(n int) string { return fmt.Sprintf("%016x", 0xb0000000+n) }

// filesUnder maps the path (relative to root) of every regular file under
// root to its content, leaving out the lock file, the queues' spare files
// (the store's scratch space, see TestSparesAreReused) and the journal.
func filesUnder(tb testing.TB, root string) map[string]string {
	tb.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && (d.Name() == ".spare" || d.Name() == ".journal") {
			return filepath.SkipDir
		}
		if err != nil || d.IsDir() || d.Name() == ".lock" {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		got[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	if err != nil {
		tb.Fatalf("walk %s: %v", root, err)
	}
	return got
}

func assertFiles(tb testing.TB, root string, want map[string]string) {
	tb.Helper()
	if diff := cmp.Diff(want, filesUnder(tb, root)); diff != "" {
		tb.Errorf("files under %s (-want +got):\n%s", root, diff)
	}
}

func mustUpdate(tb testing.TB, s *fsstore.Store, k domain.Key, fn func(*domain.Task) error) domain.Task {
	tb.Helper()
	t, err := s.Update(context.Background(), k, fn, nil)
	if err != nil {
		tb.Fatalf("update %s: %v", k.ID, err)
	}
	return t
}

// step adapts a domain transition to an Update fn.
func step(move func(domain.Task) (domain.Task, domain.Event, error)) func(*domain.Task) error {
	return func(t *domain.Task) error {
		next, _, err := move(*t)
		*t = next
		return err
	}
}

func claimBy(worker string, now time.Time) func(*domain.Task) error {
	return step(func(t domain.Task) (domain.Task, domain.Event, error) { return t.Claim(worker, time.Minute, now) })
}

func finishWith(result string, now time.Time) func(*domain.Task) error {
	return step(func(t domain.Task) (domain.Task, domain.Event, error) {
		return t.Finish("box-1", json.RawMessage(result), now)
	})
}

// TestFilesFollowTransitions checks the exact bytes on disc after each step
// of a task's life, and that nothing else is left there.
func TestFilesFollowTransitions(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir)
	ctx := context.Background()
	path := func(state string) string { return host + "/" + queue + "/" + state + "/" + id + ".json" }

	posted, _ := domain.Post(id, host, queue, json.RawMessage(`{"url":"https://ex.com/a.png","format":"jpg","width":800}`), "alice", epoch)
	if err := s.Create(ctx, posted, nil); err != nil {
		t.Fatalf("create: %v", err)
	}
	assertFiles(t, dir, map[string]string{
		path("pending"): `{"id":"9f2c1a0b7d4e6f83","host":"task.example.com","queue":"resize","status":"pending",` +
			`"item":{"url":"https://ex.com/a.png","format":"jpg","width":800},"postedBy":"alice",` +
			`"postedAt":1751500000000,"updatedAt":1751500000000,"attempts":0,"lease":null,` +
			`"progress":null,"result":null,"error":null,"finishedAt":null,"fetchedAt":null}` + "\n",
	})

	mustUpdate(t, s, keyOf(id), claimBy("box-1", epoch.Add(12*time.Second)))
	mustUpdate(t, s, keyOf(id), step(func(t domain.Task) (domain.Task, domain.Event, error) {
		return t.ReportProgress("box-1", json.RawMessage(`{"percent":40}`), time.Minute, epoch.Add(12*time.Second))
	}))
	assertFiles(t, dir, map[string]string{
		path("processing"): `{"id":"9f2c1a0b7d4e6f83","host":"task.example.com","queue":"resize","status":"processing",` +
			`"item":{"url":"https://ex.com/a.png","format":"jpg","width":800},"postedBy":"alice",` +
			`"postedAt":1751500000000,"updatedAt":1751500012000,"attempts":1,` +
			`"lease":{"worker":"box-1","until":1751500072000},` +
			`"progress":{"percent":40},"result":null,"error":null,"finishedAt":null,"fetchedAt":null}` + "\n",
	})

	mustUpdate(t, s, keyOf(id), step(func(t domain.Task) (domain.Task, domain.Event, error) {
		return t.Requeue(domain.CauseLease, domain.Retry{}, epoch.Add(80*time.Second))
	}))
	assertFiles(t, dir, map[string]string{
		path("pending"): `{"id":"9f2c1a0b7d4e6f83","host":"task.example.com","queue":"resize","status":"pending",` +
			`"item":{"url":"https://ex.com/a.png","format":"jpg","width":800},"postedBy":"alice",` +
			`"postedAt":1751500000000,"updatedAt":1751500080000,"attempts":1,"lease":null,` +
			`"progress":{"percent":40},"result":null,"error":null,"finishedAt":null,"fetchedAt":null}` + "\n",
	})

	mustUpdate(t, s, keyOf(id), finishWith(`{"url":"https://ex.com/a.jpg"}`, epoch.Add(90*time.Second)))
	mustUpdate(t, s, keyOf(id), step(func(t domain.Task) (domain.Task, domain.Event, error) {
		next, ev, _ := t.Fetch(epoch.Add(95 * time.Second))
		return next, ev, nil
	}))
	assertFiles(t, dir, map[string]string{
		path("done"): `{"id":"9f2c1a0b7d4e6f83","host":"task.example.com","queue":"resize","status":"finished",` +
			`"item":{"url":"https://ex.com/a.png","format":"jpg","width":800},"postedBy":"alice",` +
			`"postedAt":1751500000000,"updatedAt":1751500090000,"attempts":1,"lease":null,` +
			`"progress":{"percent":40},"result":{"url":"https://ex.com/a.jpg"},"error":null,` +
			`"finishedAt":1751500090000,"fetchedAt":1751500095000}` + "\n",
	})

	if err := s.Delete(ctx, keyOf(id), nil, nil); err != nil {
		t.Fatalf("delete: %v", err)
	}
	assertFiles(t, dir, map[string]string{})
}

// TestReopen checks that a restart finds every task as it was.
func TestReopen(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir)
	ctx := context.Background()
	for n := range 6 {
		posted, _ := domain.Post(taskID(n), host, queue, json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)), "", epoch.Add(time.Duration(n)*time.Second))
		if err := s.Create(ctx, posted, nil); err != nil {
			t.Fatalf("create: %v", err)
		}
	}
	other, _ := domain.Post(taskID(9), "other.example.com", "thumbs", json.RawMessage(`{}`), "bob", epoch)
	if err := s.Create(ctx, other, nil); err != nil {
		t.Fatalf("create: %v", err)
	}
	now := epoch.Add(time.Minute)
	mustUpdate(t, s, keyOf(taskID(1)), claimBy("box-1", now))
	mustUpdate(t, s, keyOf(taskID(2)), claimBy("box-2", now))
	mustUpdate(t, s, keyOf(taskID(2)), finishWith(`{"size":2048}`, now))
	mustUpdate(t, s, keyOf(taskID(3)), step(func(t domain.Task) (domain.Task, domain.Event, error) { return t.Timeout(now) }))

	want := map[domain.Key]domain.Task{}
	for _, k := range []domain.Key{keyOf(taskID(0)), keyOf(taskID(1)), keyOf(taskID(2)), keyOf(taskID(3)), keyOf(taskID(4)), keyOf(taskID(5)), domain.KeyOf(other)} {
		want[k], _ = s.Get(ctx, k)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}

	again := mustOpen(t, dir)
	for k, w := range want {
		got, err := again.Get(ctx, k)
		if err != nil {
			t.Fatalf("get %s after reopen: %v", k.ID, err)
		}
		if diff := cmp.Diff(w, got); diff != "" {
			t.Errorf("task %s after reopen (-want +got):\n%s", k.ID, diff)
		}
	}
	if got, want := countsOf(again, ref), (ports.Counts{Pending: 3, Processing: 1, Done: 2, Failed: 1}); got != want {
		t.Errorf("counts after reopen = %+v, want %+v", got, want)
	}
	var order []string
	_ = again.Each(ctx, ref, domain.StagePending, func(t domain.Task) bool { order = append(order, t.ID); return true })
	if diff := cmp.Diff([]string{taskID(0), taskID(4), taskID(5)}, order); diff != "" {
		t.Errorf("pending order after reopen (-want +got):\n%s", diff)
	}
	if got := again.Recovered(); len(got) != 0 {
		t.Errorf("a clean reopen recovered %v", got)
	}
	// The reopened store keeps working: the next claim is the oldest pending.
	claimed, err := again.ClaimNext(ctx, ref, nil, now, claimBy("box-3", now), nil)
	if err != nil || claimed.ID != taskID(0) {
		t.Errorf("claim after reopen = %s, %v; want %s", claimed.ID, err, taskID(0))
	}
}

// onDisc is a task file written by hand, as a crash would leave it.
type onDisc struct {
	state   string // pending, processing or done
	name    string // file name
	content string
}

// record is the stored form of task id in the given status.
func record(tb testing.TB, id string, status domain.Status) string {
	tb.Helper()
	t, _ := domain.Post(id, host, queue, json.RawMessage(`{"url":"https://ex.com/a.png"}`), "alice", epoch)
	var err error
	now := epoch.Add(time.Second)
	switch status {
	case domain.Processing:
		t, _, err = t.Claim("box-1", time.Minute, now)
	case domain.Finished:
		t, _, err = t.Finish("box-1", json.RawMessage(`{"ok":true}`), now)
	case domain.Failed:
		t, _, err = t.Timeout(now)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return string(domain.EncodeTask(t))
}

func writeFiles(tb testing.TB, dir string, files []onDisc) {
	tb.Helper()
	for _, f := range files {
		path := filepath.Join(dir, host, queue, f.state, f.name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(f.content), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
}

// TestRecoverInterruptedMove covers a crash between writing a move's
// destination and unlinking its source: the later state wins.
func TestRecoverInterruptedMove(t *testing.T) {
	cases := []struct {
		name   string
		states []domain.Status
		want   domain.Status
	}{
		{"pending and done", []domain.Status{domain.Pending, domain.Finished}, domain.Finished},
		{"pending and processing", []domain.Status{domain.Pending, domain.Processing}, domain.Processing},
		{"processing and done", []domain.Status{domain.Processing, domain.Failed}, domain.Failed},
		{"all three", []domain.Status{domain.Pending, domain.Processing, domain.Finished}, domain.Finished},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			var files []onDisc
			for _, st := range c.states {
				files = append(files, onDisc{st.Dir(), id + ".json", record(t, id, st)})
			}
			writeFiles(t, dir, files)

			s := mustOpen(t, dir)
			got, err := s.Get(context.Background(), keyOf(id))
			if err != nil {
				t.Fatalf("get: %v", err)
			}
			if got.Status != c.want {
				t.Errorf("status = %s, want %s", got.Status, c.want)
			}
			assertFiles(t, dir, map[string]string{
				host + "/" + queue + "/" + c.want.Dir() + "/" + id + ".json": record(t, id, c.want),
			})
			var want ports.Counts
			switch c.want.Dir() {
			case "processing":
				want.Processing = 1
			case "done":
				want.Done = 1
				if c.want == domain.Failed {
					want.Failed = 1
				}
			}
			if got := s.Counts(ref); got != want {
				t.Errorf("counts = %+v, want %+v", got, want)
			}
			if len(s.Recovered()) != 0 {
				t.Errorf("recovered = %v, want nothing corrupt", s.Recovered())
			}
		})
	}
}

// TestRecoverTempFilesAndForeignNames removes the temp files of interrupted
// writes and leaves every name that is not ours untouched.
func TestRecoverTempFilesAndForeignNames(t *testing.T) {
	dir := t.TempDir()
	good := record(t, id, domain.Pending)
	writeFiles(t, dir, []onDisc{
		{"pending", id + ".json", good},
		{"pending", "." + id + ".json.tmp-123456", `{"id":"9f2c`},
		{"done", "." + taskID(1) + ".json.tmp-987", ``},
		{"pending", "README", "notes"},
		{"pending", "ABCDEF0123456789.json", "{}"},
		{"processing", "x.json", "{}"},
		{"pending", ".hidden", "x"},
	})
	// Names outside the state directories that are not ours either.
	foreign := map[string]string{
		"stray.txt": "y",
		"Upper.example.com/" + queue + "/pending/" + id + ".json": good,
		host + "/bad_queue!/pending/" + id + ".json":              good,
		host + "/notes.json": "{}",
	}
	for rel, content := range foreign {
		path := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	s := mustOpen(t, dir)
	p := host + "/" + queue + "/"
	want := map[string]string{
		p + "pending/" + id + ".json":       good,
		p + "pending/README":                "notes",
		p + "pending/ABCDEF0123456789.json": "{}",
		p + "processing/x.json":             "{}",
		p + "pending/.hidden":               "x",
	}
	for rel, content := range foreign {
		want[rel] = content
	}
	assertFiles(t, dir, want)
	if got := countsOf(s, ref); got != (ports.Counts{Pending: 1}) {
		t.Errorf("counts = %+v, want one pending", got)
	}
	if len(s.Recovered()) != 0 {
		t.Errorf("recovered = %v, want nothing corrupt", s.Recovered())
	}
}

// TestRecoverCorrupt moves every unusable file to corrupt/ and reports it.
func TestRecoverCorrupt(t *testing.T) {
	dir := t.TempDir()
	otherQueue := strings.Replace(record(t, taskID(4), domain.Pending), `"queue":"resize"`, `"queue":"thumbs"`, 1)
	files := []onDisc{
		{"pending", taskID(1) + ".json", `{"id":"` + taskID(1) + `","host":`},        // cut short
		{"pending", taskID(2) + ".json", record(t, taskID(9), domain.Pending)},       // another id inside
		{"pending", taskID(3) + ".json", record(t, taskID(3), domain.Finished)},      // status not of its dir
		{"pending", taskID(4) + ".json", otherQueue},                                 // another queue's task
		{"done", taskID(5) + ".json", `{"id":"` + taskID(5) + `","status":"weird"}`}, // bad status
		{"pending", taskID(6) + ".json", "garbage"},                                  // corrupt twice:
		{"done", taskID(6) + ".json", "more garbage"},                                // the names must not collide
		{"processing", taskID(7) + ".json", record(t, taskID(7), domain.Processing)}, // a good one
		// What a power loss can leave of a move: the destination's data
		// never written, or the source's name pointing at a spare's new
		// record. The task lives in its other copy: no failed event.
		{"pending", taskID(8) + ".json", record(t, taskID(8), domain.Pending)},
		{"processing", taskID(8) + ".json", ""},
		{"pending", taskID(10) + ".json", record(t, taskID(11), domain.Processing)},
		{"processing", taskID(10) + ".json", record(t, taskID(10), domain.Processing)},
	}
	writeFiles(t, dir, files)

	s := mustOpen(t, dir)
	p := host + "/" + queue + "/"
	want := map[string]string{
		p + "processing/" + taskID(7) + ".json":  files[7].content,
		p + "pending/" + taskID(8) + ".json":     files[8].content,
		p + "corrupt/" + taskID(8) + ".json":     files[9].content,
		p + "corrupt/" + taskID(10) + ".json":    files[10].content,
		p + "processing/" + taskID(10) + ".json": files[11].content,
	}
	for _, f := range files[:6] {
		want[p+"corrupt/"+f.name] = f.content
	}
	want[p+"corrupt/"+taskID(6)+".json.1"] = files[6].content
	assertFiles(t, dir, want)

	got := s.Recovered()
	if len(got) != 7 {
		t.Fatalf("recovered %d files, want 7: %v", len(got), got)
	}
	seen := map[string]bool{}
	for _, c := range got {
		if c.Host != host || c.Queue != queue || c.Err == nil {
			t.Errorf("corrupt entry %+v: want host, queue and a reason", c)
		}
		rel, err := filepath.Rel(dir, c.Path)
		if err != nil || want[filepath.ToSlash(rel)] == "" || !strings.HasPrefix(filepath.Base(c.Path), c.ID+".json") {
			t.Errorf("corrupt entry %+v: path is not its file in corrupt/", c)
		}
		seen[c.ID] = true
	}
	for n := 1; n <= 6; n++ {
		if !seen[taskID(n)] {
			t.Errorf("task %s not reported corrupt", taskID(n))
		}
		if _, err := s.Get(context.Background(), keyOf(taskID(n))); !errors.Is(err, domain.ErrNotFound) {
			t.Errorf("corrupt task %s is in the index: %v", taskID(n), err)
		}
	}
	for _, n := range []int{8, 10} {
		if _, err := s.Get(context.Background(), keyOf(taskID(n))); err != nil {
			t.Errorf("task %s, good in one state, is not in the index: %v", taskID(n), err)
		}
	}
	if got := s.Counts(ref); got.Pending != 1 || got.Processing != 2 || got.Done != 0 {
		t.Errorf("counts = %+v, want the three good tasks", got)
	}

	// Nothing is recovered twice: a second start finds a clean folder.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if again := mustOpen(t, dir); len(again.Recovered()) != 0 {
		t.Errorf("second open recovered %v", again.Recovered())
	}
	assertFiles(t, dir, want)
}

// TestSecondOpenFails checks the one-process-per-folder lock.
func TestSecondOpenFails(t *testing.T) {
	dir := t.TempDir()
	first, err := fsstore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = fsstore.Open(dir)
	if !errors.Is(err, fsstore.ErrLocked) {
		t.Fatalf("second open = %v, want ErrLocked", err)
	}
	wantMsg := fmt.Sprintf("items folder %s is in use by another taskhoster process (pid %d)", dir, os.Getpid())
	if !strings.Contains(err.Error(), wantMsg) {
		t.Errorf("error %q does not say %q", err, wantMsg)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	posted, _ := domain.Post(id, host, queue, json.RawMessage(`{}`), "", epoch)
	if err := first.Create(context.Background(), posted, nil); domain.KindOf(err) != domain.KindUnavailable {
		t.Errorf("create on a closed store = %v, want KindUnavailable", err)
	}
	mustOpen(t, dir)
}

// TestInvalidNamesWriteNothing makes sure no name, from a task or from an
// update, becomes a path: nothing is written anywhere.
func TestInvalidNamesWriteNothing(t *testing.T) {
	root := t.TempDir()
	items := filepath.Join(root, "items")
	s := mustOpen(t, items)
	ctx := context.Background()
	for _, c := range []struct{ host, queue, id string }{
		{"..", queue, id},
		{"../escape", queue, id},
		{".hidden", queue, id},
		{"a..b", queue, id},
		{host, "..", id},
		{host, "../../escape", id},
		{host, ".", id},
		{host, queue, "../../../../escape"},
		{host, queue, "../" + id[:13]},
		{host, queue, ""},
	} {
		posted, _ := domain.Post(c.id, c.host, c.queue, json.RawMessage(`{}`), "", epoch)
		if err := s.Create(ctx, posted, nil); domain.KindOf(err) != domain.KindInvalid {
			t.Errorf("create %q/%q/%q = %v, want KindInvalid", c.host, c.queue, c.id, err)
		}
	}
	assertFiles(t, root, map[string]string{})

	posted, _ := domain.Post(id, host, queue, json.RawMessage(`{}`), "", epoch)
	if err := s.Create(ctx, posted, nil); err != nil {
		t.Fatal(err)
	}
	before := filesUnder(t, root)
	for _, change := range []func(*domain.Task){
		func(t *domain.Task) { t.Host = "../escape" },
		func(t *domain.Task) { t.Queue = "../escape" },
		func(t *domain.Task) { t.ID = "../escape" },
		func(t *domain.Task) { t.Status = "../../../escape" },
	} {
		if _, err := s.Update(ctx, keyOf(id), func(t *domain.Task) error { change(t); return nil }, nil); err == nil {
			t.Error("update renaming the task succeeded")
		}
	}
	assertFiles(t, root, before)
	if _, err := os.Stat(filepath.Join(root, "escape")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("something was written outside the items folder: %v", err)
	}
}

// TestWriteFailureChangesNothing breaks the disc under a queue and checks
// that the store says "unavailable" and keeps its index and files as they
// were. (A file where a directory should be fails even for root.)
func TestWriteFailureChangesNothing(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir)
	ctx := context.Background()
	posted, _ := domain.Post(id, host, queue, json.RawMessage(`{}`), "", epoch)
	if err := s.Create(ctx, posted, nil); err != nil {
		t.Fatal(err)
	}
	claimed := mustUpdate(t, s, keyOf(id), claimBy("box-1", epoch))

	done := filepath.Join(dir, host, queue, "done")
	if err := os.Remove(done); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(done, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	before := filesUnder(t, dir)

	_, err := s.Update(ctx, keyOf(id), finishWith(`{}`, epoch.Add(time.Second)), nil)
	var derr *domain.Error
	if !errors.As(err, &derr) || derr.Kind != domain.KindUnavailable || derr.Code != "storage_unavailable" {
		t.Fatalf("finish on a broken disc = %v, want storage_unavailable", err)
	}
	if errors.Unwrap(err) == nil {
		t.Error("the error does not wrap its cause")
	}
	if got, _ := s.Get(ctx, keyOf(id)); !cmp.Equal(claimed, got) {
		t.Errorf("index changed by a failed write: %s", cmp.Diff(claimed, got))
	}
	assertFiles(t, dir, before)
	if got := s.Counts(ref); got != (ports.Counts{Processing: 1}) {
		t.Errorf("counts = %+v after a failed write", got)
	}

	// A new queue whose host folder cannot be made.
	blocked := "blocked.example.com"
	if err := os.WriteFile(filepath.Join(dir, blocked), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	other, _ := domain.Post(taskID(1), blocked, queue, json.RawMessage(`{}`), "", epoch)
	if err := s.Create(ctx, other, nil); domain.KindOf(err) != domain.KindUnavailable {
		t.Errorf("create on a broken disc = %v, want KindUnavailable", err)
	}
	if _, err := s.Get(ctx, domain.KeyOf(other)); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("a failed create left the task in the index: %v", err)
	}

	// Mended, the same store carries on.
	if err := os.Remove(done); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(done, 0o750); err != nil {
		t.Fatal(err)
	}
	if got := mustUpdate(t, s, keyOf(id), finishWith(`{}`, epoch.Add(time.Second))); got.Status != domain.Finished {
		t.Errorf("finish after mending = %s", got.Status)
	}
	if got := s.Counts(ref); got != (ports.Counts{Done: 1}) {
		t.Errorf("counts = %+v after finishing", got)
	}
}

// TestClaimRemembersVerdicts checks that a claim that finds nothing, asked
// again, runs its query only over the tasks it has not seen.
func TestClaimRemembersVerdicts(t *testing.T) {
	s := mustOpen(t, t.TempDir())
	ctx := context.Background()
	post := func(n int, item string) {
		t.Helper()
		posted, _ := domain.Post(taskID(n), host, queue, json.RawMessage(item), "", epoch.Add(time.Duration(n)*time.Second))
		if err := s.Create(ctx, posted, nil); err != nil {
			t.Fatal(err)
		}
	}
	for n := range 10 {
		post(n, `{"kind":"image"}`)
	}
	m := &contract.CountingMatcher{Want: `{"kind":"video"}`}
	for range 3 {
		if _, err := s.ClaimNext(ctx, ref, m, epoch, claimBy("box-1", epoch), nil); !errors.Is(err, domain.ErrNotFound) {
			t.Fatalf("claim = %v, want ErrNotFound", err)
		}
	}
	if m.Calls != 10 {
		t.Errorf("query ran %d times over 10 tasks, want 10", m.Calls)
	}
	post(10, `{"kind":"video"}`)
	got, err := s.ClaimNext(ctx, ref, m, epoch, claimBy("box-1", epoch), nil)
	if err != nil || got.ID != taskID(10) {
		t.Fatalf("claim = %s, %v; want %s", got.ID, err, taskID(10))
	}
	if m.Calls != 11 {
		t.Errorf("query ran %d times, want 11: once more, for the new task", m.Calls)
	}
	// A different query is asked afresh.
	other := &contract.CountingMatcher{Want: `{"kind":"image"}`}
	if _, err := s.ClaimNext(ctx, ref, other, epoch, claimBy("box-1", epoch), nil); err != nil || other.Calls != 1 {
		t.Errorf("claim with another query = %v after %d calls, want a task after 1", err, other.Calls)
	}
}

// countsOf is s's counts of ref without Oldest, which the contract suite
// checks; these tests count tasks.
func countsOf(s *fsstore.Store, ref domain.QueueRef) ports.Counts {
	c := s.Counts(ref)
	c.Oldest = time.Time{}
	return c
}
