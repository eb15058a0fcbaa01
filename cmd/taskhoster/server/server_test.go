package server

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/zap"
)

// TestGraphIsComplete builds the whole dependency graph without running it:
// a missing or doubled provider fails here, not at a user's first start.
func TestGraphIsComplete(t *testing.T) {
	cfg := Config{
		Hosts: t.TempDir(), Items: t.TempDir(), Logs: t.TempDir(),
		Addr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", Sync: "none", Sweep: time.Second, LogDays: 21,
	}
	if err := fx.ValidateApp(Options(cfg, zap.NewNop())); err != nil {
		t.Fatal(err)
	}
	cfg.Store, cfg.DatabaseURL = "postgres", "postgres://127.0.0.1:1/none"
	if err := fx.ValidateApp(Options(cfg, zap.NewNop())); err != nil {
		t.Fatalf("on PostgreSQL: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	good := Config{Sync: "always", Sweep: time.Second, LogDays: 1}
	if err := good.Validate(); err != nil {
		t.Fatalf("good config refused: %v", err)
	}
	for name, bad := range map[string]Config{
		"sync":           {Sync: "sometimes", Sweep: time.Second, LogDays: 1},
		"sweep":          {Sync: "none", LogDays: 1},
		"sweep of 1µs":   {Sync: "none", Sweep: time.Microsecond, LogDays: 1},
		"log days":       {Sync: "none", Sweep: time.Second},
		"ws-ping of 1ms": {Sync: "none", Sweep: time.Second, LogDays: 1, WSPing: time.Millisecond},
		"ws-ping below":  {Sync: "none", Sweep: time.Second, LogDays: 1, WSPing: -time.Second},
	} {
		if bad.Validate() == nil {
			t.Errorf("%s: bad config accepted", name)
		}
	}
}

// /healthz and /readyz answer 503 once the journal has stopped after a
// failed flush: the server can take no write until it is restarted.
func TestHealthFailsOnceTheJournalStopped(t *testing.T) {
	var stopped error
	ready := &Ready{stopped: func() error { return stopped }}
	healthz, readyz := healthHandlers(ready)
	probe := func(h http.HandlerFunc) (int, string) {
		rec := httptest.NewRecorder()
		h(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		return rec.Code, strings.TrimSpace(rec.Body.String())
	}
	for _, tc := range []struct {
		name                string
		up                  bool
		stopped             error
		healthz, readyz     int
		healthBody, rdyBody string
	}{
		{"starting", false, nil, 200, 503, "ok", "not ready"},
		{"serving", true, nil, 200, 200, "ok", "ready"},
		{"stopped", true, errors.New("commit failed; restart the server: EIO"), 503, 503,
			"stopped: commit failed; restart the server: EIO", "stopped: commit failed; restart the server: EIO"},
	} {
		ready.Store(tc.up)
		stopped = tc.stopped
		if code, body := probe(healthz); code != tc.healthz || body != tc.healthBody {
			t.Errorf("%s: /healthz %d %q, want %d %q", tc.name, code, body, tc.healthz, tc.healthBody)
		}
		if code, body := probe(readyz); code != tc.readyz || body != tc.rdyBody {
			t.Errorf("%s: /readyz %d %q, want %d %q", tc.name, code, body, tc.readyz, tc.rdyBody)
		}
	}
}
