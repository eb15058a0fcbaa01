package client

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A localhost name is dialled on loopback, IPv4 first and IPv6 when that
// fails; every other address goes to the wrapped dial unchanged.
func TestDialLocalhostGoesToLoopback(t *testing.T) {
	refused := errors.New("refused")
	tests := []struct {
		name, network, addr string
		up                  map[string]bool // addresses that answer
		want                []string        // addresses dialled, in order
		ok                  bool
	}{
		{"a name under localhost", "tcp", "task.example.com.localhost:8080", map[string]bool{"127.0.0.1:8080": true}, []string{"127.0.0.1:8080"}, true},
		{"localhost itself, in capitals, with the dot", "tcp", "LocalHost.:80", map[string]bool{"127.0.0.1:80": true}, []string{"127.0.0.1:80"}, true},
		{"IPv6 when IPv4 refuses", "tcp", "a.localhost:1", map[string]bool{"[::1]:1": true}, []string{"127.0.0.1:1", "[::1]:1"}, true},
		{"both refuse", "tcp", "a.localhost:1", nil, []string{"127.0.0.1:1", "[::1]:1"}, false},
		{"tcp6 only", "tcp6", "a.localhost:1", map[string]bool{"[::1]:1": true}, []string{"[::1]:1"}, true},
		{"another name", "tcp", "example.com:443", map[string]bool{"example.com:443": true}, []string{"example.com:443"}, true},
		{"a name that merely ends so", "tcp", "notlocalhost:80", map[string]bool{"notlocalhost:80": true}, []string{"notlocalhost:80"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var dialled []string
			dial := dialLocalhost(func(_ context.Context, network, addr string) (net.Conn, error) {
				dialled = append(dialled, addr)
				if network != tt.network {
					t.Errorf("network %q, want %q", network, tt.network)
				}
				if !tt.up[addr] {
					return nil, refused
				}
				c, _ := net.Pipe()
				return c, nil
			})
			conn, err := dial(context.Background(), tt.network, tt.addr)
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, refused)) {
				t.Errorf("err = %v, want ok %v", err, tt.ok)
			}
			if conn != nil {
				conn.Close()
			}
			if diff := cmp.Diff(tt.want, dialled); diff != "" {
				t.Errorf("dialled (-want +got):\n%s", diff)
			}
		})
	}
}

// A proxy is never asked to reach a localhost name; other requests go to
// it as before.
func TestNoProxyForLocalhost(t *testing.T) {
	via, _ := url.Parse("http://proxy.example:3128")
	proxy := proxyNotLocalhost(func(*http.Request) (*url.URL, error) { return via, nil })
	for target, want := range map[string]*url.URL{
		"http://task.example.com.localhost:8080/q": nil,
		"http://localhost/q":                       nil,
		"https://task.example.com/q":               via,
	} {
		r, _ := http.NewRequest("GET", target, nil)
		if got, err := proxy(r); err != nil || got != want {
			t.Errorf("%s: proxy %v, %v; want %v", target, got, err, want)
		}
	}
}
