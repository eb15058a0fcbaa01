package fsstore

// Crash drops s as a killed process would: the folder lock is let go, and
// nothing is flushed or settled. The journal is the test's to drop
// (durable.Syncer.Close, which does not settle either).
func Crash(s *Store) {
	s.files.closed.Store(true)
	_ = s.lock.Close()
}
