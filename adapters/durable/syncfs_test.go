package durable

import (
	"os"
	"path/filepath"
	"testing"
)

// TestFileSystemsAreFlushedOnce checks that directories on one filesystem
// are flushed once: syncfs of one of them covers them all.
func TestFileSystemsAreFlushedOnce(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	fsys, err := openFileSystems(a, b, a)
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.close()
	if len(fsys.files) != 1 {
		t.Errorf("kept %d directories for one filesystem, want 1", len(fsys.files))
	}
	// /proc is never on the same filesystem as a temp dir.
	fsys2, err := openFileSystems(a, "/proc")
	if err != nil {
		t.Fatal(err)
	}
	defer fsys2.close()
	if len(fsys2.files) != 2 {
		t.Errorf("kept %d directories for two filesystems, want 2", len(fsys2.files))
	}
}

// TestSyncfs flushes a real filesystem.
func TestSyncfs(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	fsys, err := openFileSystems(a, b, a)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a, "x.json"), []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := fsys.flushAll(); err != nil {
		t.Fatalf("flush: %v", err)
	}
	if err := fsys.close(); err != nil {
		t.Fatalf("close: %v", err)
	}

	if _, err := openFileSystems(filepath.Join(a, "missing")); err == nil {
		t.Error("openFileSystems accepted a directory that does not exist")
	}
}

// TestTrailingFollowsTheFilesystem: one trailing flush on ext4 without a
// journal (this machine's own disc), none on tmpfs, whose data never
// reaches a disc anyway.
func TestTrailingFollowsTheFilesystem(t *testing.T) {
	for _, c := range []struct {
		dir  string
		want int
	}{
		{"/dev/shm", 0},
	} {
		fsys, err := openFileSystems(c.dir)
		if err != nil {
			t.Skipf("%s: %v", c.dir, err)
		}
		if got := fsys.trailing; got != c.want {
			t.Errorf("%s: trailing %d, want %d", c.dir, got, c.want)
		}
		_ = fsys.close()
	}
}
