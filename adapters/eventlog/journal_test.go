package eventlog_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/taskhoster/taskhoster/adapters/durable"
)

// TestLinesGoToTheJournalAtTheirOffsets: with a journal, each line is
// recorded at the offset it was written to, after a torn tail the file
// already had was cut, so that after a power loss that took the day
// file's data, replay puts back exactly the bytes that were there.
func TestLinesGoToTheJournalAtTheirOffsets(t *testing.T) {
	dir := t.TempDir()
	path := dayFile(dir, "2026-07-26")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	earlier := `{"id":"a"}` + "\n"
	if err := os.WriteFile(path, []byte(earlier+`{"id":"torn`), 0o644); err != nil {
		t.Fatal(err)
	}
	items := t.TempDir()
	t.Setenv(durable.BootEnv, "before")
	noCheckpoint := func() error { return nil }
	j, err := durable.Open(durable.Config{Items: items, Logs: dir, Record: true, Checkpoint: noCheckpoint})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Settle(); err != nil { // the first lap
		t.Fatal(err)
	}
	l := mustOpen(t, dir)
	l.UseJournal(j.Root(durable.Logs))
	at := time.Date(2026, 7, 26, 9, 0, 0, 0, time.UTC)
	for _, id := range []string{"00000000000000c1", "00000000000000c2", "00000000000000c3"} {
		if err := l.Append(context.Background(), eventAt(t, id, at), false); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	written, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_ = j.Close()

	// The power loss kept the line from before the journal, lost the rest.
	if err := os.WriteFile(path, []byte(earlier), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(durable.BootEnv, "after")
	again, err := durable.Open(durable.Config{Items: items, Logs: dir, Record: true, Checkpoint: noCheckpoint})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if records, _, err := again.Replay(); err != nil || records != 3 {
		t.Fatalf("replay: %d records, %v", records, err)
	}
	if got, _ := os.ReadFile(path); string(got) != string(written) {
		t.Errorf("day file after replay:\n%s\nwant:\n%s", got, written)
	}
}
