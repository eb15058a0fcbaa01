package fsstore

// Crash drops s as a killed process would: the folder lock and the
// journal's files are let go, and nothing is flushed or settled.
func Crash(s *Store) {
	s.files.closed.Store(true)
	if s.files.journal != nil {
		_ = s.files.journal.Close()
	}
	_ = s.lock.Close()
}
