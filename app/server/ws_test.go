package server

import (
	"testing"
	"time"
)

// TestSocketTimings: the SPEC's 15 s / 30 s unless TASKHOSTER_WS_PING says
// otherwise; a silent peer is always given two ping intervals.
func TestSocketTimings(t *testing.T) {
	cases := []struct {
		name, env          string
		set                bool
		wantPing, wantPeer time.Duration
		wantErr            bool
	}{
		{name: "default", wantPing: 15 * time.Second, wantPeer: 30 * time.Second},
		{name: "from the environment", env: "200ms", set: true, wantPing: 200 * time.Millisecond, wantPeer: 400 * time.Millisecond},
		{name: "not a duration", env: "soon", set: true, wantErr: true},
		{name: "not positive", env: "0s", set: true, wantErr: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.set {
				t.Setenv("TASKHOSTER_WS_PING", c.env)
			}
			var cfg Config
			err := socketTimings(&cfg)
			if (err != nil) != c.wantErr {
				t.Fatalf("error = %v, want error %v", err, c.wantErr)
			}
			if !c.wantErr && (cfg.WSPing != c.wantPing || cfg.WSPeerTimeout != c.wantPeer) {
				t.Errorf("ping %v, peer timeout %v; want %v, %v", cfg.WSPing, cfg.WSPeerTimeout, c.wantPing, c.wantPeer)
			}
		})
	}
}
