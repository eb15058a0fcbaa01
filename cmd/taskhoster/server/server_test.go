package server

import (
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
		"sync":     {Sync: "sometimes", Sweep: time.Second, LogDays: 1},
		"sweep":    {Sync: "none", LogDays: 1},
		"log days": {Sync: "none", Sweep: time.Second},
	} {
		if bad.Validate() == nil {
			t.Errorf("%s: bad config accepted", name)
		}
	}
}
