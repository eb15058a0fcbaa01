package fsstore_test

import (
	"testing"

	"github.com/taskhoster/taskhoster/adapters/fsstore"
)

// mustOpen opens dir and closes it when the test ends.
func mustOpen(tb testing.TB, dir string) *fsstore.Store {
	tb.Helper()
	s, err := fsstore.Open(dir)
	if err != nil {
		tb.Fatalf("open %s: %v", dir, err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}
