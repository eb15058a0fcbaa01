package postgres

import "sync"

// sequencer runs a queue's Then calls one at a time, in the order their
// changes took tickets, and tells readers whether a task's Then is still
// to return. A change takes its ticket while it holds its row lock, just
// before COMMIT, so a task's changes take tickets in store order.
type sequencer struct {
	mu       sync.Mutex
	cond     sync.Cond
	next     uint64            // the next ticket to hand out
	turn     uint64            // the ticket whose Then may run now
	inflight map[string]uint64 // task id → its latest ticket, until that Then returned
}

func (s *sequencer) init() {
	s.cond.L = &s.mu
	s.inflight = make(map[string]uint64)
}

// take hands out the next ticket, for a change of task id.
func (s *sequencer) take(id string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.next
	s.next++
	s.inflight[id] = t
	return t
}

// run waits for ticket's turn, runs fn (nil: a change that was not stored)
// and passes the turn on.
func (s *sequencer) run(ticket uint64, id string, fn func() error) error {
	s.mu.Lock()
	for s.turn != ticket {
		s.cond.Wait()
	}
	s.mu.Unlock()
	defer func() { // also if fn panics, or every later Then would wait forever
		s.mu.Lock()
		s.turn++
		if s.inflight[id] == ticket {
			delete(s.inflight, id)
		}
		s.cond.Broadcast()
		s.mu.Unlock()
	}()
	if fn == nil {
		return nil
	}
	return fn()
}

// settle waits until every change of task id that took a ticket has run
// its Then.
func (s *sequencer) settle(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		t, ok := s.inflight[id]
		if !ok || s.turn > t {
			return
		}
		s.cond.Wait()
	}
}
