package sqlitelogs_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/taskhoster/taskhoster/adapters/sqlitelogs"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/domain/tasklog"
)

// TestTheStoreIsClosedToOtherUsers: the mirror holds what the server's
// payload archive holds (items, results, failures), which the server keeps
// in folders 0750 and files 0600. The mirror's folder and files must not be
// readable by other users of the machine either.
func TestTheStoreIsClosedToOtherUsers(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "mirror")
	s, err := sqlitelogs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := line(0, 1, domain.EventPosted, func(l *tasklog.Line) { l.Archived = []string{"item"} })
	mustCommit(t, s, tasklog.Cursor{Offset: 100}, l)
	ref := tasklog.PayloadRef{Source: "task.example.com", Host: l.Host, Queue: l.Queue, ID: l.ID, File: "item.json", Want: 1}
	if err := s.SavePayload(context.Background(), ref, []byte(`{"secret":1}`)); err != nil {
		t.Fatal(err)
	}

	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm&0o007 != 0 {
		t.Errorf("store folder mode %v: open to other users", perm)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			t.Errorf("%s mode %v: readable by other users", e.Name(), perm)
		}
	}
}
