package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A browser's state-changing request from another site is refused with the
// API's JSON error; the same site's, and any client's that is not a
// browser (no Sec-Fetch-Site, no Origin), pass, as do reads.
func TestCrossOriginRequestsAreRefused(t *testing.T) {
	h := crossOrigin(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	for _, c := range []struct {
		name, method string
		header       map[string]string
		status       int
	}{
		{"a form posted from another site", "POST", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
		{"an older browser's post from another origin", "POST", map[string]string{"Origin": "https://evil.example"}, 403},
		{"a delete from another site", "DELETE", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
		{"the dashboard's own post", "POST", map[string]string{"Sec-Fetch-Site": "same-origin"}, 204},
		{"curl, the CLI or the Go client", "POST", nil, 204},
		{"a read from another site", "GET", map[string]string{"Sec-Fetch-Site": "cross-site"}, 204},
	} {
		req := httptest.NewRequest(c.method, "http://task.example.com/ops/pause", nil)
		for k, v := range c.header {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.status {
			t.Errorf("%s: %d, want %d", c.name, rec.Code, c.status)
		}
		if c.status == 403 && (rec.Header().Get("Content-Type") != "application/json" || !strings.Contains(rec.Body.String(), `"error":"forbidden"`)) {
			t.Errorf("%s: %q %s, want the JSON error", c.name, rec.Header().Get("Content-Type"), rec.Body)
		}
	}
}
