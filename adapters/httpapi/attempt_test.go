package httpapi_test

import (
	"net/http"
	"testing"
)

// A worker that names its claim's attempt in a report over HTTP holds the
// task whatever notBefore it had: a delayed post (or a backoff, or a
// retry, which sets notBefore) is still its claim. The attempt alone is
// all an HTTP claim reply tells it.
func TestAnAttemptNamesTheClaimOfADelayedTask(t *testing.T) {
	api, _ := newAPI(t)
	code, m := send(t, api, "POST", "/open?delay=0.001", `{}`)
	if code != http.StatusCreated {
		t.Fatalf("post: %d %v", code, m)
	}
	id := m["id"].(string)
	for i := 0; ; i++ {
		code, m = send(t, api, "POST", "/open/claim", `{"worker":"w1","wait":1}`)
		if code == http.StatusOK {
			break
		}
		if i == 10 {
			t.Fatalf("claim: %d %v", code, m)
		}
	}
	if m["id"] != id || m["attempts"] != 1.0 {
		t.Fatalf("claimed %v", m)
	}
	for _, call := range []struct{ name, body string }{
		{"heartbeat", `{"worker":"w1","attempt":1}`},
		{"progress", `{"worker":"w1","attempt":1,"progress":{"p":1}}`},
		{"release", `{"worker":"w1","attempt":1}`},
	} {
		code, m = send(t, api, "POST", "/open/"+id+"/"+call.name, call.body)
		if code != http.StatusOK || m["accepted"] != true {
			t.Errorf("%s by the holder naming its attempt: %d %v", call.name, code, m)
		}
	}
}
