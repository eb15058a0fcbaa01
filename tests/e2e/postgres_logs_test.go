package e2e

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/internal/pgtest"
)

// A server on PostgreSQL keeps its event log in the database and serves it
// through the same /_logs API: `taskhoster logs pull` mirrors every line a
// user may read, byte for byte, then only new lines, as from day files,
// and the archived bodies; and no day file is written.
func TestPostgresLogsPull(t *testing.T) {
	d := newDirs(t)
	logsQueues(t, d)
	s := start(t, d, "--store", "postgres", "--database-url", pgtest.Database(t))
	store := t.TempDir()

	s.finishTask("resize", 1)
	s.finishTask("resize", 2)
	s.finishTask("private", 3)
	archived := s.finishTask("archived", 7)
	want := s.readableLines()
	if len(want) != 3*6 {
		t.Fatalf("the server logged %d readable lines, want 18", len(want))
	}

	// The day list: one day, its size the bytes of every line (all hosts').
	r := s.do("GET", "/_logs/tasks", aliceToken, "")
	var days []struct {
		Day  string
		Size int64
	}
	if err := json.Unmarshal(r.Body, &days); err != nil {
		t.Fatalf("GET /_logs/tasks: %d %s: %v", r.Status, r.Body, err)
	}
	total := int64(len(databaseLines(t, s.databaseURL())))
	if r.Status != http.StatusOK || len(days) != 1 || days[0].Size != total {
		t.Fatalf("GET /_logs/tasks: %d %s, want one day of %d bytes", r.Status, r.Body, total)
	}
	// Lines from an offset, and X-Next-Offset at the end.
	r = s.do("GET", "/_logs/tasks/"+days[0].Day+"?offset=0", aliceToken, "")
	if next, _ := strconv.ParseInt(r.Header.Get("X-Next-Offset"), 10, 64); r.Status != http.StatusOK || next != total {
		t.Errorf("GET lines from 0: %d, X-Next-Offset %q, want %d", r.Status, r.Header.Get("X-Next-Offset"), total)
	}
	if got := strings.Split(strings.TrimSuffix(string(r.Body), "\n"), "\n"); !cmp.Equal(got, want) {
		t.Errorf("GET lines from 0 (-want +got):\n%s", cmp.Diff(want, got))
	}
	if r := s.do("GET", "/_logs/tasks/"+days[0].Day+"?offset=1", aliceToken, ""); r.Status != http.StatusBadRequest {
		t.Errorf("offset inside a line: %d %s, want 400", r.Status, r.Body)
	}

	if n := s.mustPull(store); n != len(want) {
		t.Errorf("first pull reported %d new lines, want %d", n, len(want))
	}
	if diff := cmp.Diff(want, mirrored(t, store)); diff != "" {
		t.Fatalf("mirror after the first pull (-server +mirror):\n%s", diff)
	}
	// The archived bodies came too, from the database.
	for file, body := range map[string]string{
		"item.json":      `{"url":"https://ex.com/7.png","n":7}`,
		"progress.jsonl": "{\"percent\":40}\n{\"percent\":90}\n",
		"result.json":    `{"url":"https://ex.com/7.jpg"}`,
	} {
		if got := payload(t, store, "archived", archived, file); got != body {
			t.Errorf("task %s %s = %q, want %q", archived, file, got, body)
		}
	}
	if n := s.mustPull(store); n != 0 {
		t.Errorf("second pull reported %d new lines, want 0", n)
	}
	s.finishTask("resize", 4)
	want = s.readableLines()
	if n := s.mustPull(store); n != 6 {
		t.Errorf("third pull reported %d new lines, want 6", n)
	}
	if diff := cmp.Diff(want, mirrored(t, store)); diff != "" {
		t.Fatalf("mirror after the third pull (-server +mirror):\n%s", diff)
	}
	if exists(d.logs + "/tasks") {
		t.Error("a server on PostgreSQL wrote day files")
	}
}
