package bench

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// The bench's own HTTP client sends what net/http's would (method, path,
// Host, token, body), keeps one connection for requests one after another,
// dials again once the server closes it, and ends a request waiting on the
// wire when its context ends.
func TestWireSpeaksHTTP(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	conns := map[net.Conn]bool{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+" "+r.Host+" "+r.Header.Get("Authorization")+" "+r.Header.Get("Content-Type")+" "+string(body))
		mu.Unlock()
		switch r.URL.Path {
		case "/close":
			w.Header().Set("Connection", "close")
		case "/wait":
			<-r.Context().Done()
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"a"}`)
	}))
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			conns[c] = true
			mu.Unlock()
		}
	}
	srv.Start()
	defer srv.Close()
	a := newAPI(Target{URL: srv.URL, Host: "bench.local", Token: "T", Queue: "q"})
	defer a.close()
	ctx := context.Background()

	for range 3 {
		code, data, err := a.do(ctx, http.MethodPost, "/q", []byte(`{"n":1}`))
		if err != nil || code != http.StatusCreated || string(data) != `{"id":"a"}` {
			t.Fatalf("post: %d %q %v", code, data, err)
		}
	}
	if code, _, err := a.do(ctx, http.MethodGet, "/close", nil); err != nil || code != http.StatusCreated {
		t.Fatalf("get: %d %v", code, err)
	}
	if _, _, err := a.do(ctx, http.MethodGet, "/q", nil); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if want := "POST /q bench.local Bearer T application/json {\"n\":1}"; seen[0] != want {
		t.Errorf("server saw %q, want %q", seen[0], want)
	}
	if want := "GET /q bench.local Bearer T  "; seen[4] != want {
		t.Errorf("server saw %q, want %q", seen[4], want)
	}
	if len(conns) != 2 {
		t.Errorf("%d connections for 5 requests, one closed by the server after the 4th: want 2", len(conns))
	}
	mu.Unlock()

	wait, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, _, err := a.do(wait, http.MethodGet, "/wait", nil); err == nil {
		t.Error("a request whose context ended got an answer")
	}
}
