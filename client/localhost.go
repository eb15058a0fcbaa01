package client

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
)

// NewTransport returns a transport like http.DefaultTransport that, as
// browsers do, takes "localhost" and every name ending in ".localhost" to
// be this machine: it dials them on 127.0.0.1 (then ::1) without asking
// DNS, which knows no such names, and never through a proxy. The request
// keeps its name in the Host header and as the TLS server name, so
// http://task.example.com.localhost:8080 reaches the host folder
// task.example.com of a server on this machine.
//
// A Client made without WithHTTPClient uses one such transport; to keep
// this with a client of your own, give it NewTransport() (or a transport
// whose DialContext does the same).
func NewTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = dialLocalhost(t.DialContext)
	t.Proxy = proxyNotLocalhost(t.Proxy)
	return t
}

// defaultHTTP is the http.Client of every Client made without
// WithHTTPClient: one transport, so they share its pool of connections as
// users of http.DefaultClient do.
var defaultHTTP = sync.OnceValue(func() *http.Client { return &http.Client{Transport: NewTransport()} })

// dialFunc is the type of http.Transport.DialContext.
type dialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// dialLocalhost wraps dial (nil: a plain net.Dialer) to dial a localhost
// name on the loopback addresses; any other address is dial's.
func dialLocalhost(dial dialFunc) dialFunc {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil || !isLocalhost(host) {
			return dial(ctx, network, addr)
		}
		// IPv4 first: a server told to listen on 127.0.0.1 (make run)
		// is the common case; ::1 for one listening there alone.
		var errs []error
		for _, ip := range []string{"127.0.0.1", "::1"} {
			if network == "tcp6" && ip == "127.0.0.1" || network == "tcp4" && ip == "::1" {
				continue
			}
			conn, err := dial(ctx, network, net.JoinHostPort(ip, port))
			if err == nil {
				return conn, nil
			}
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
		}
		return nil, errors.Join(errs...)
	}
}

// proxyNotLocalhost wraps proxy (nil: no proxy) to send no request for a
// localhost name through a proxy, which could not reach this machine's
// loopback; Go's own rule spares only "localhost" and loopback IPs.
func proxyNotLocalhost(proxy func(*http.Request) (*url.URL, error)) func(*http.Request) (*url.URL, error) {
	return func(r *http.Request) (*url.URL, error) {
		if proxy == nil || isLocalhost(r.URL.Hostname()) {
			return nil, nil
		}
		return proxy(r)
	}
}

// isLocalhost reports whether host names this machine by the rule of RFC
// 6761 §6.3: "localhost" or a name under ".localhost", in any case, with
// or without the final dot.
func isLocalhost(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	return h == "localhost" || strings.HasSuffix(h, ".localhost")
}
