package eventlog

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/taskhoster/taskhoster/domain"
)

// A progress line archived into an old folder just after Prune found the
// folder old must survive: Prune looks again under the lock before removing.
func TestPruneLooksAgainBeforeRemoving(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	now := time.Now()
	old := now.AddDate(0, 0, -30)
	const id = "9f2c1a0b7d4e6f83"
	folder := filepath.Join(dir, payloadsDir, "task.example.com", "resize", id)
	if err := os.MkdirAll(folder, 0o755); err != nil {
		t.Fatal(err)
	}
	item := filepath.Join(folder, ItemFile)
	if err := os.WriteFile(item, []byte(`{}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{item, folder} {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}

	ev := domain.Event{Kind: domain.EventProgress, At: now, Worker: "box-1", Task: domain.Task{
		ID: id, Host: "task.example.com", Queue: "resize", Status: domain.Processing, Attempts: 1,
		Progress: json.RawMessage(`{"percent":40}`),
	}}
	looked := 0
	l.afterFirstLook = func(string) {
		looked++
		if err := l.Append(context.Background(), ev, true); err != nil {
			t.Error(err)
		}
	}
	if err := l.Prune(context.Background(), now, 1); err != nil {
		t.Fatal(err)
	}
	if looked != 1 {
		t.Fatalf("Prune looked at %d old folders, want 1", looked)
	}
	got, err := os.ReadFile(filepath.Join(folder, ProgressFile))
	if err != nil || string(got) != "{\"percent\":40}\n" {
		t.Errorf("progress.jsonl = %q, %v; want the line archived during Prune", got, err)
	}
}
