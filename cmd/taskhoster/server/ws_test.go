package server

import (
	"net"
	"testing"
	"time"
)

// TestDefaults: the SPEC's 15 s ping and 30 s silence unless told
// otherwise; a silent peer is always given two ping intervals.
func TestDefaults(t *testing.T) {
	cases := []struct {
		name               string
		ping               time.Duration
		wantPing, wantPeer time.Duration
	}{
		{name: "default", wantPing: 15 * time.Second, wantPeer: 30 * time.Second},
		{name: "short for tests", ping: 200 * time.Millisecond, wantPing: 200 * time.Millisecond, wantPeer: 400 * time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := withDefaults(Config{WSPing: c.ping})
			if got.WSPing != c.wantPing || got.WSPeerTimeout != c.wantPeer || got.MaxConns != DefaultMaxConns {
				t.Errorf("got %+v", got)
			}
		})
	}
}

// TestLimitListener: past n open connections a new one waits until one
// closes; closing the listener ends a waiting Accept.
func TestLimitListener(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := limitListener(raw, 1)
	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	for range 2 {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	first := <-accepted
	select {
	case <-accepted:
		t.Fatal("a second connection was accepted while the first was open")
	case <-time.After(200 * time.Millisecond):
	}
	first.Close()
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("the second connection was not accepted after the first closed")
	}
	ln.Close()
	for range accepted {
	}
}
