package eventlog_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/domain"
)

const (
	idA = "9f2c1a0b7d4e6f83" // the lifecycle's task that finishes
	idB = "3a71bd0c5e2f9481" // the one that times out
	idC = "18c4e05a9f2b7d63" // the corrupt one
)

func archiveDir(dir, id string) string {
	return filepath.Join(dir, "tasks-payloads", "task.example.com", "resize", id)
}

// TestAppendArchivesBodies appends every event of the lifecycle for an
// archiving queue and checks, after each, the "archived" of its line and
// every file of the archive.
func TestAppendArchivesBodies(t *testing.T) {
	evs := lifecycle(t)
	item := filepath.Join(idA, "item.json")
	progress := filepath.Join(idA, "progress.jsonl")
	result := filepath.Join(idA, "result.json")
	steps := []struct {
		event    string
		archived []string
		files    map[string]string // the whole archive after the event
	}{
		{"posted", []string{"item"}, map[string]string{item: `{"url":"https://ex.com/a.png"}`}},
		{"claimed", []string{}, map[string]string{item: `{"url":"https://ex.com/a.png"}`}},
		{"progress", []string{"progress"}, map[string]string{
			item: `{"url":"https://ex.com/a.png"}`, progress: `{"percent":40}` + "\n",
		}},
		{"requeue", []string{}, nil}, // nil: unchanged
		{"claimed again", []string{}, nil},
		{"result", []string{"result"}, map[string]string{
			item: `{"url":"https://ex.com/a.png"}`, progress: `{"percent":40}` + "\n", result: `{"ok":true}`,
		}},
		{"fetched", []string{}, nil},
		{"cleaned", []string{}, nil}, // the archive outlives the task
		{"timeout", []string{"error"}, map[string]string{
			item: `{"url":"https://ex.com/a.png"}`, progress: `{"percent":40}` + "\n", result: `{"ok":true}`,
			filepath.Join(idB, "error.json"): `"timeout"`,
		}},
		{"failed", []string{"error"}, map[string]string{
			item: `{"url":"https://ex.com/a.png"}`, progress: `{"percent":40}` + "\n", result: `{"ok":true}`,
			filepath.Join(idB, "error.json"): `"timeout"`,
			filepath.Join(idC, "error.json"): `"corrupt"`,
		}},
		// A cancel or a retry archives nothing: the item is there since
		// its post, and "cancelled" is the line's own error code.
		{"cancelled", []string{}, nil},
		{"retried", []string{}, nil},
	}
	dir := t.TempDir()
	l := mustOpen(t, dir)
	var files map[string]string
	for i, s := range steps {
		if err := l.Append(context.Background(), evs[s.event], true); err != nil {
			t.Fatalf("%s: %v", s.event, err)
		}
		lines := readLines(t, dayFile(dir, day0))
		if diff := cmp.Diff(s.archived, archivedOf(t, lines[i])); diff != "" {
			t.Errorf("%s: archived (-want +got):\n%s", s.event, diff)
		}
		if s.files != nil {
			files = s.files
		}
		if diff := cmp.Diff(files, archiveFiles(t, dir)); diff != "" {
			t.Errorf("after %s: archive (-want +got):\n%s", s.event, diff)
		}
	}

	// The seed's example line, whole.
	want := `{"t":1785056817,"at":"2026-07-26T09:06:57.004Z","host":"task.example.com","queue":"resize","id":"9f2c1a0b7d4e6f83","event":"result","status":"finished","attempts":2,"worker":"box-2","bytes":{"item":30,"progress":14,"result":11,"error":0},"archived":["result"]}`
	if got := readLines(t, dayFile(dir, day0))[5]; got != want {
		t.Errorf("result line\n got %s\nwant %s", got, want)
	}
}

func TestProgressLinesAreAppended(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir)
	ev := lifecycle(t)["progress"]
	for _, p := range []string{`{"percent":10}`, `{"percent": 20}`, `"half"`} {
		ev.Task.Progress = json.RawMessage(p)
		if err := l.Append(context.Background(), ev, true); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(filepath.Join(archiveDir(dir, idA), "progress.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "{\"percent\":10}\n{\"percent\":20}\n\"half\"\n"; string(got) != want {
		t.Errorf("progress.jsonl = %q, want %q", got, want)
	}
}

// TestTornProgressLineIsCut: a progress line a crash left half-written at
// the end of progress.jsonl (a write cut by SIGKILL part-way, or a power
// loss) is cut before the next progress is appended, so the next line does
// not run into it and the log API serves whole, valid lines.
func TestTornProgressLineIsCut(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(archiveDir(dir, idA), "progress.jsonl")
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("{\"percent\":10}\n{\"perc"), 0o600); err != nil {
		t.Fatal(err)
	}
	l := mustOpen(t, dir)
	ev := lifecycle(t)["progress"]
	ev.Task.Progress = json.RawMessage(`{"percent":30}`)
	if err := l.Append(context.Background(), ev, true); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "{\"percent\":10}\n{\"percent\":30}\n"; string(got) != want {
		t.Errorf("progress.jsonl = %q, want %q", got, want)
	}
}

// A body is archived as the task file holds it, so its size is the number
// the line gives for it.
func TestArchivedBodyIsTheStoredForm(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir)
	ev := lifecycle(t)["posted"]
	ev.Task.Item = json.RawMessage("{ \"url\" : \"a<b\",\n \"n\": [1, 2] }")
	if err := l.Append(context.Background(), ev, true); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(archiveDir(dir, idA), "item.json"))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"url":"a\u003cb","n":[1,2]}`; string(got) != want {
		t.Errorf("item.json = %s, want %s", got, want)
	}
	var line struct {
		Bytes struct{ Item int }
	}
	if err := json.Unmarshal([]byte(readLines(t, dayFile(dir, day0))[0]), &line); err != nil {
		t.Fatal(err)
	}
	if line.Bytes.Item != len(got) {
		t.Errorf("bytes.item = %d, item.json holds %d", line.Bytes.Item, len(got))
	}
}

func TestNoArchiveWithoutTheSetting(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir)
	for name, ev := range lifecycle(t) {
		if err := l.Append(context.Background(), ev, false); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "tasks-payloads")); !os.IsNotExist(err) {
		t.Errorf("tasks-payloads exists without archiving: %v", err)
	}
}

// If a body cannot be written, the line is not written either: a line never
// names a body that is not there.
func TestNoLineWhenTheBodyCannotBeWritten(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir)
	// A file where the archive's folder should be.
	mustWrite(t, filepath.Join(dir, "tasks-payloads"))
	err := l.Append(context.Background(), lifecycle(t)["posted"], true)
	assertLogUnavailable(t, err)
	if _, err := os.Stat(dayFile(dir, day0)); !os.IsNotExist(err) {
		if lines := readLines(t, dayFile(dir, day0)); len(lines) != 0 {
			t.Errorf("lines written without their body: %q", lines)
		}
	}
}

func TestArchiveRefusesNamesThatAreNotNames(t *testing.T) {
	tests := map[string]func(*domain.Task){
		"host climbing out": func(t *domain.Task) { t.Host = "../../escape" },
		"host with a slash": func(t *domain.Task) { t.Host = "a/b" },
		"queue of dots":     func(t *domain.Task) { t.Queue = ".." },
		"queue with slash":  func(t *domain.Task) { t.Queue = "x/../../y" },
		"id of dots":        func(t *domain.Task) { t.ID = "../../../../etc" },
		"upper-case id":     func(t *domain.Task) { t.ID = "9F2C1A0B7D4E6F83" },
	}
	for name, spoil := range tests {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "logs")
			l := mustOpen(t, dir)
			ev := lifecycle(t)["posted"]
			spoil(&ev.Task)
			if err := l.Append(context.Background(), ev, true); err == nil {
				t.Fatal("Append with a bad name succeeded")
			}
			// Nothing but the empty tasks folder, inside or outside logs/.
			var got []string
			_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
				rel, _ := filepath.Rel(root, path)
				got = append(got, rel)
				return err
			})
			if diff := cmp.Diff([]string{".", "logs", filepath.Join("logs", "tasks")}, got); diff != "" {
				t.Errorf("files (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPruneAgesArchivesOutWithTheDayFiles(t *testing.T) {
	now := time.Date(2026, 7, 26, 12, 0, 0, 0, time.UTC)
	lastInstantBefore := time.Date(2026, 7, 25, 23, 59, 59, 999_000_000, time.UTC)
	firstInstantOf := time.Date(2026, 7, 26, 0, 0, 0, 0, time.UTC)
	old := now.AddDate(0, 0, -3)

	dir := t.TempDir()
	l := mustOpen(t, dir)
	payloads := filepath.Join(dir, "tasks-payloads")
	// task writes a task archive folder whose files and folder were last
	// modified at the given times.
	task := func(rel string, folder time.Time, files map[string]time.Time) {
		t.Helper()
		p := filepath.Join(payloads, rel)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, mt := range files {
			writeFileAt(t, filepath.Join(p, name), mt)
		}
		mustChtimes(t, p, folder)
	}
	at := func(mt time.Time) map[string]time.Time {
		return map[string]time.Time{"item.json": mt, "result.json": mt}
	}
	// With one day of window, everything before today goes.
	task("h.example/q/aaaaaaaaaaaaaaa1", lastInstantBefore, at(lastInstantBefore))
	task("h.example/q/aaaaaaaaaaaaaaa2", firstInstantOf, at(firstInstantOf))
	// Progress appended today changes the file, not the folder.
	task("h.example/q/aaaaaaaaaaaaaaa3", old, map[string]time.Time{"item.json": old, "progress.jsonl": firstInstantOf})
	// A folder added to today (a temp file since removed, say) is kept.
	task("h.example/q/aaaaaaaaaaaaaaa4", firstInstantOf, at(old))
	// A clock set back: from the future, kept.
	task("h.example/q/aaaaaaaaaaaaaaa5", now.AddDate(0, 0, 5), at(now.AddDate(0, 0, 5)))
	// An empty folder left by a failed write.
	task("h.example/q/aaaaaaaaaaaaaaa6", old, nil)
	// A queue and a host with nothing left: their folders go too.
	task("h.example/gone/bbbbbbbbbbbbbbb1", old, at(old))
	task("gone.example/q/ccccccccccccccc1", old, at(old))
	mustChtimes(t, filepath.Join(payloads, "gone.example", "q"), old)
	// Not ours: names that are no host, queue or id are left alone, and
	// keep their folders.
	task("h.example/odd/not-an-id", old, at(old))
	task("h.example/Upper/ddddddddddddddd1", old, at(old))
	writeFileAt(t, filepath.Join(payloads, "h.example", "notes", "readme.txt"), old)
	// A day file of the same age goes as well.
	mustWrite(t, dayFile(dir, "2026-07-25"))

	if err := l.Prune(context.Background(), now, 1); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"h.example/Upper/ddddddddddddddd1/item.json",
		"h.example/Upper/ddddddddddddddd1/result.json",
		"h.example/notes/readme.txt",
		"h.example/odd/not-an-id/item.json",
		"h.example/odd/not-an-id/result.json",
		"h.example/q/aaaaaaaaaaaaaaa2/item.json",
		"h.example/q/aaaaaaaaaaaaaaa2/result.json",
		"h.example/q/aaaaaaaaaaaaaaa3/item.json",
		"h.example/q/aaaaaaaaaaaaaaa3/progress.jsonl",
		"h.example/q/aaaaaaaaaaaaaaa4/item.json",
		"h.example/q/aaaaaaaaaaaaaaa4/result.json",
		"h.example/q/aaaaaaaaaaaaaaa5/item.json",
		"h.example/q/aaaaaaaaaaaaaaa5/result.json",
	}
	if diff := cmp.Diff(want, treeOf(t, payloads)); diff != "" {
		t.Errorf("archive after prune (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string(nil), namesIn(t, filepath.Join(dir, "tasks"))); diff != "" {
		t.Errorf("day files after prune (-want +got):\n%s", diff)
	}
	for _, gone := range []string{"h.example/gone", "gone.example"} {
		if _, err := os.Stat(filepath.Join(payloads, gone)); !os.IsNotExist(err) {
			t.Errorf("empty folder %s not removed: %v", gone, err)
		}
	}
}

// The archive is walked once per day of the window: a folder that looks old
// only later in the same day (restored from a backup) waits for the next.
func TestPruneWalksTheArchiveOncePerDay(t *testing.T) {
	now := time.Date(2026, 7, 26, 12, 0, 0, 0, time.UTC)
	old := now.AddDate(0, 0, -3)
	dir := t.TempDir()
	l := mustOpen(t, dir)
	if err := l.Prune(context.Background(), now, 1); err != nil {
		t.Fatal(err)
	}
	task := filepath.Join(dir, "tasks-payloads", "h.example", "q", "aaaaaaaaaaaaaaa1")
	writeFileAt(t, filepath.Join(task, "item.json"), old)
	mustChtimes(t, task, old)

	if err := l.Prune(context.Background(), now.Add(11*time.Hour), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(task); err != nil {
		t.Fatalf("walked again within the day: %v", err)
	}
	if err := l.Prune(context.Background(), now.Add(13*time.Hour), 1); err != nil { // the next UTC day
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "tasks-payloads", "h.example")); !os.IsNotExist(err) {
		t.Fatalf("archive not pruned on the next day: %v", err)
	}
}

// A body written while Prune runs is never lost to it: Prune removes a
// folder only if it is still old under the lock that writers hold, so a
// line never names a body that Prune removed as it was written.
func TestPruneDoesNotRemoveAFolderBeingWritten(t *testing.T) {
	const tasks = 300
	now := time.Now()
	old := now.AddDate(0, 0, -30)
	dir := t.TempDir()
	l := mustOpen(t, dir)
	ids := make([]string, tasks)
	for i := range ids {
		ids[i] = fmt.Sprintf("%016x", i)
		folder := archiveDir(dir, ids[i])
		writeFileAt(t, filepath.Join(folder, "item.json"), old)
		mustChtimes(t, folder, old)
	}

	go1 := make(chan struct{})
	done := make(chan error)
	go func() {
		<-go1
		ev := lifecycle(t)["progress"]
		ev.At = now
		for _, id := range ids {
			ev.Task.ID = id
			if err := l.Append(context.Background(), ev, true); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	close(go1)
	// Each window is another oldest kept day, so each call walks the
	// archive; the old folders are out of every one, today's in all.
	for days := 1; days <= 20; days++ {
		if err := l.Prune(context.Background(), now, days); err != nil {
			t.Error(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		got, err := os.ReadFile(filepath.Join(archiveDir(dir, id), "progress.jsonl"))
		if err != nil || string(got) != `{"percent":40}`+"\n" {
			t.Errorf("progress of %s: %q, %v", id, got, err)
		}
	}
}

// archivedOf is the "archived" of one line.
func archivedOf(tb testing.TB, line string) []string {
	tb.Helper()
	var v struct {
		Archived []string `json:"archived"`
	}
	if err := json.Unmarshal([]byte(line), &v); err != nil {
		tb.Fatal(err)
	}
	return v.Archived
}

// archiveFiles maps each file of the resize queue's archive, by <id>/<file>,
// to its content.
func archiveFiles(tb testing.TB, dir string) map[string]string {
	tb.Helper()
	root := filepath.Join(dir, "tasks-payloads", "task.example.com", "resize")
	files := map[string]string{}
	for _, rel := range treeOf(tb, root) {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			tb.Fatal(err)
		}
		files[filepath.FromSlash(rel)] = string(b)
	}
	return files
}

// treeOf lists the files under root, relative and slash-separated, sorted.
func treeOf(tb testing.TB, root string) []string {
	tb.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, path)
		files = append(files, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	slices.Sort(files)
	return files
}

func writeFileAt(tb testing.TB, path string, mt time.Time) {
	tb.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		tb.Fatal(err)
	}
	mustWrite(tb, path)
	mustChtimes(tb, path, mt)
}

func mustChtimes(tb testing.TB, path string, mt time.Time) {
	tb.Helper()
	if err := os.Chtimes(path, mt, mt); err != nil {
		tb.Fatal(err)
	}
}

// A Prune stopped by its ctx leaves the rest of the archive for the next
// call, which walks again although it is the same day.
func TestPruneStoppedWalksAgain(t *testing.T) {
	now := time.Date(2026, 7, 26, 12, 0, 0, 0, time.UTC)
	old := now.AddDate(0, 0, -3)
	dir := t.TempDir()
	l := mustOpen(t, dir)
	task := filepath.Join(dir, "tasks-payloads", "h.example", "q", "aaaaaaaaaaaaaaa1")
	writeFileAt(t, filepath.Join(task, "item.json"), old)
	mustChtimes(t, task, old)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Prune(ctx, now, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Prune: %v", err)
	}
	if _, err := os.Stat(task); err != nil {
		t.Fatalf("cancelled Prune removed the folder: %v", err)
	}
	if err := l.Prune(context.Background(), now, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(task); !os.IsNotExist(err) {
		t.Fatalf("the next Prune the same day did not walk again: %v", err)
	}
}
