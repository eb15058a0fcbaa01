package folderconfig

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The safety-net rescan reloads only when scan's fingerprint moves, so it
// must move for every kind of change a reload would see.
func TestScanFingerprint(t *testing.T) {
	dir := t.TempDir()
	queues := filepath.Join(dir, "h.example", queuesFolder)
	if err := os.MkdirAll(queues, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(queues, "q.json")

	dirs, last := scan(dir)
	if want := []string{dir, filepath.Join(dir, "h.example"), queues}; !slices.Equal(dirs, want) {
		t.Errorf("watched folders = %v, want %v", dirs, want)
	}
	steps := []struct {
		name   string
		change func() error
	}{
		{"add a file", func() error { return os.WriteFile(file, []byte(`{}`), 0o644) }},
		{"grow it", func() error { return os.WriteFile(file, []byte(`{"item": {}}`), 0o644) }},
		{"add a user folder", func() error { return os.Mkdir(filepath.Join(dir, "h.example", usersFolder), 0o755) }},
		{"remove the file", func() error { return os.Remove(file) }},
		{"remove the host", func() error { return os.RemoveAll(filepath.Join(dir, "h.example")) }},
	}
	for _, s := range steps {
		if err := s.change(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		_, fp := scan(dir)
		if fp == last {
			t.Errorf("%s: the fingerprint did not change", s.name)
		}
		last = fp
	}
	if _, fp := scan(dir); fp != last {
		t.Errorf("the fingerprint changed with nothing changed")
	}
}
