package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gorilla/websocket"
)

// lockstep is a worker socket used one message at a time, for latency
// measurements: a reader goroutine stamps each message the moment it
// arrives, whatever the caller is doing then.
type lockstep struct {
	wait time.Duration // the longest a reply may take
	c    socket
	msgs chan arrival
	stop chan struct{}
	ref  int64
}

// arrival is one message from the server and when it came.
type arrival struct {
	m   claimed
	at  time.Time
	err error
}

func openLockstep(ctx context.Context, a *api, worker string, wait time.Duration) (*lockstep, error) {
	c, err := a.dial(ctx, worker)
	if err != nil {
		return nil, err
	}
	s := &lockstep{wait: wait, c: c, msgs: make(chan arrival, 4), stop: make(chan struct{})}
	go func() {
		for {
			m, err := readMsg(c)
			select {
			case s.msgs <- arrival{m, time.Now(), err}:
			case <-s.stop:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return s, nil
}

func (s *lockstep) close() {
	close(s.stop)
	_ = s.c.Close()
}

// claim opens a claim for a task matching query (nil: any).
func (s *lockstep) claim(query json.RawMessage) error {
	s.ref++
	return s.c.WriteMessage(websocket.TextMessage, socketClaim(s.ref, query))
}

// result hands in the result of task id.
func (s *lockstep) result(id string) error {
	s.ref++
	return s.c.WriteMessage(websocket.TextMessage, socketResult(s.ref, id))
}

// next waits (up to s.wait) for the next message, which must be of type want.
func (s *lockstep) next(ctx context.Context, want string) (arrival, error) {
	select {
	case a := <-s.msgs:
		if a.err != nil {
			return a, a.err
		}
		if a.m.Type != want {
			return a, fmt.Errorf("got a %q message, want %q", a.m.Type, want)
		}
		return a, nil
	case <-ctx.Done():
		return arrival{}, ctx.Err()
	case <-time.After(s.wait):
		return arrival{}, fmt.Errorf("no %q message within %s", want, s.wait)
	}
}

// finish hands in the result of id and waits for it to be accepted.
func (s *lockstep) finish(ctx context.Context, id string) error {
	if err := s.result(id); err != nil {
		return err
	}
	ack, err := s.next(ctx, "ack")
	if err != nil {
		return err
	}
	if !ack.m.Accepted {
		return fmt.Errorf("result of %s refused", id)
	}
	return nil
}
