package postgres

// DirectWaiting is how many changes wait for a batch of posts and guessed
// updates: tests of claims riding their posts wait for both to be in line.
func (s *Store) DirectWaiting() int {
	s.direct.mu.Lock()
	defer s.direct.mu.Unlock()
	return len(s.direct.waiting)
}
