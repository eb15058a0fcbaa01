package wsapi

// AfterSettle has fn run between each claim's settling (the task held, its
// cancel watch ready) and its task message: a window a test can widen.
func (s *Sockets) AfterSettle(fn func()) { s.afterSettle = fn }

// Held is how many tasks the open worker sockets hold, and how many ended
// claims they remember (worker.held, worker.ended).
func (s *Sockets) Held() (held, ended int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for r := range s.upgraded {
		if w, ok := r.(*worker); ok {
			w.mu.Lock()
			held, ended = held+len(w.held), ended+len(w.ended)
			w.mu.Unlock()
		}
	}
	return held, ended
}
