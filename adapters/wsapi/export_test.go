package wsapi

// AfterSettle has fn run between each claim's settling (the task held, its
// cancel watch ready) and its task message: a window a test can widen.
func (s *Sockets) AfterSettle(fn func()) { s.afterSettle = fn }
