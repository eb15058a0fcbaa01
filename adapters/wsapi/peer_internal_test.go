package wsapi

import "testing"

// The reply of last resort is built from the error table, and is still the
// exact text it always was.
func TestInternalErrorReply(t *testing.T) {
	const want = `{"type":"error","error":"internal","message":"internal error","details":[]}`
	if string(internalError) != want {
		t.Errorf("internalError = %s, want %s", internalError, want)
	}
	if got := string(encode(func() {})); got != want {
		t.Errorf("a reply that does not encode gives %s, want %s", got, want)
	}
}
