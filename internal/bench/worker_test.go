package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// TestSocketWorkerWorksOnWhileResultsWaitForAcks gives a socket worker
// with one claim open a server that acks no result until every task's
// result is in, as a slow flush would: the worker must hand in the next
// results meanwhile (one claim open, several results waiting), or the run
// never ends.
func TestSocketWorkerWorksOnWhileResultsWaitForAcks(t *testing.T) {
	const n = 5
	srv := newAckHoldingSocket(t, n)
	l := newLedger(n)
	for i := range n {
		l.ids[i] = fmt.Sprintf("t%d", i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a := newAPI(Target{URL: srv.URL, Host: "bench.local", Queue: "q"})
	defer a.close()
	go func() {
		<-ctx.Done()
		l.fail(fmt.Errorf("the run did not end: %d of %d tasks accepted", l.completed.Load(), n))
	}()
	socketWorker(ctx, a, "w0", 1, l)
	if _, err := l.verify(); err != nil {
		t.Fatal(err)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.maxClaims != 1 {
		t.Errorf("at most %d claims open at once, want 1", srv.maxClaims)
	}
}

// ackHoldingSocket is a worker socket of n tasks t0, t1, ... that answers
// each claim with the next task and holds every result's ack back until
// all n results are in.
type ackHoldingSocket struct {
	*httptest.Server
	mu        sync.Mutex
	maxClaims int
}

func newAckHoldingSocket(t *testing.T, n int) *ackHoldingSocket {
	s := &ackHoldingSocket{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		var claims []json.RawMessage // open claims' refs
		var acks []json.RawMessage   // held-back acks' refs
		next := 0
		for {
			var m struct {
				Type string
				Ref  json.RawMessage
			}
			if err := c.ReadJSON(&m); err != nil {
				return
			}
			switch m.Type {
			case "claim":
				claims = append(claims, m.Ref)
				s.mu.Lock()
				s.maxClaims = max(s.maxClaims, len(claims))
				s.mu.Unlock()
			case "result":
				acks = append(acks, m.Ref)
			}
			for len(claims) > 0 && next < n {
				_ = c.WriteJSON(map[string]any{"type": "task", "ref": claims[0], "id": fmt.Sprintf("t%d", next),
					"item": json.RawMessage(item(next, "work", 50)), "attempts": 1})
				claims, next = claims[1:], next+1
			}
			if len(acks) == n {
				for _, ref := range acks {
					_ = c.WriteJSON(map[string]any{"type": "ack", "ref": ref, "accepted": true})
				}
				acks = nil
			}
		}
	}))
	t.Cleanup(s.Close)
	return s
}
