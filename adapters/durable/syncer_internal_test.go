package durable

import "testing"

// TestNewDedupesFilesystems checks that directories on one filesystem are
// flushed once: syncfs of one of them covers them all.
func TestNewDedupesFilesystems(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	s, err := New(a, b, a)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if len(s.fsys.files) != 1 {
		t.Errorf("kept %d directories for one filesystem, want 1", len(s.fsys.files))
	}
	// /proc is never on the same filesystem as a temp dir.
	s2, err := New(a, "/proc")
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if len(s2.fsys.files) != 2 {
		t.Errorf("kept %d directories for two filesystems, want 2", len(s2.fsys.files))
	}
}
