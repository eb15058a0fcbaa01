package postgres

import (
	"context"
	"sync"
	"time"

	"github.com/taskhoster/taskhoster/domain"
)

// pauseTTL is how long Paused trusts a "not paused" it read: a pause set
// through another server reaches this one's answers (GET /{queue}) within
// it, its claims at once, as their statements read the pause themselves
// (unpaused, tasks.go). One set through this Store counts at once. A
// "paused" is never trusted past its read: a resume through another server
// wakes the claims waiting here (pgnotify broadcasts it), and each must
// find the queue resumed, or it goes back to sleep with the queue's tasks
// still pending and nothing to wake it again. While paused, claims look
// only when woken, so the reads stay few.
const pauseTTL = time.Second

// pauseCache remembers what Paused read, per queue, for pauseTTL.
type pauseCache struct {
	mu   sync.Mutex
	seen map[domain.QueueRef]pauseSeen
}

type pauseSeen struct {
	paused bool
	at     time.Time
}

func newPauseCache() pauseCache { return pauseCache{seen: make(map[domain.QueueRef]pauseSeen)} }

func (c *pauseCache) get(ref domain.QueueRef) (pauseSeen, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.seen[ref]
	return p, ok && !p.paused && time.Since(p.at) < pauseTTL
}

func (c *pauseCache) put(ref domain.QueueRef, paused bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[ref] = pauseSeen{paused: paused, at: time.Now()}
}

// Paused reports whether ref is paused (a row of pauses), as read now or,
// if it was not paused then, within the last pauseTTL. A database that
// cannot be reached keeps the last answer, or none: not paused.
func (s *Store) Paused(ref domain.QueueRef) bool {
	if p, fresh := s.pauses.get(ref); fresh {
		return p.paused
	}
	ctx, cancel := shortCtx()
	defer cancel()
	var paused bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pauses WHERE host = $1 AND queue = $2)`, ref.Host, ref.Queue).Scan(&paused)
	if err != nil {
		p, _ := s.pauses.get(ref)
		return p.paused
	}
	s.pauses.put(ref, paused)
	return paused
}

// SetPaused pauses or resumes ref; it is durable once it returns.
func (s *Store) SetPaused(ctx context.Context, ref domain.QueueRef, paused bool) error {
	if !domain.ValidHost(ref.Host) || !domain.ValidName(ref.Queue) {
		return domain.E(domain.KindInvalid, domain.CodeInvalidRequest, "bad queue %s/%s", ref.Host, ref.Queue)
	}
	query := `DELETE FROM pauses WHERE host = $1 AND queue = $2`
	if paused {
		query = `INSERT INTO pauses (host, queue) VALUES ($1, $2) ON CONFLICT DO NOTHING`
	}
	if _, err := s.pool.Exec(ctx, query, ref.Host, ref.Queue); err != nil {
		return fail("pause "+ref.Host+"/"+ref.Queue, err)
	}
	s.pauses.put(ref, paused)
	return nil
}
