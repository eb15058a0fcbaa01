package fsstore

// Crash drops s as a killed process would: its descriptors are closed and
// the folder lock is let go, and nothing is flushed or settled. The journal
// is the test's to drop (durable.Syncer.Close, which does not settle
// either).
func Crash(s *Store) {
	s.files.closed.Store(true)
	s.files.closeHeld()
	_ = s.lock.Close()
}

// HoldAtMost has s hold at most n descriptors open (spares.go).
func HoldAtMost(s *Store, n int64) {
	s.files.limitOnce.Do(func() {})
	s.files.limit = n
}
