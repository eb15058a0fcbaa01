package e2e

import (
	"net/http"
	"testing"
)

// TestPostgresPauseOnOneServerStopsClaimsOnAnother: once a pause through
// server A has answered (SPEC §12, README: "while a queue is paused ...
// claims hand nothing out"), no claim on server B takes a task, though B
// read the queue as not paused a moment before (it trusts such a read for a
// second); and a resume through A hands the task to a claim waiting on B.
func TestPostgresPauseOnOneServerStopsClaimsOnAnother(t *testing.T) {
	a, b, _ := twoManaged(t)
	// B has looked at the queue's pause lately: a claim that found nothing.
	b.do("POST", "/opsopen/claim", "", `{"worker":"w-b"}`).want(t, "claim on B, nothing pending", http.StatusNoContent, "")
	id := a.post("opsopen", "", `{"n":1}`)
	a.do("POST", "/opsopen/pause", "", ``).want(t, "pause on A", http.StatusOK, "")
	r := b.do("POST", "/opsopen/claim", "", `{"worker":"w-b"}`)
	if r.Status != http.StatusNoContent {
		t.Errorf("claim on B after the pause on A was answered: %d %s (task %s), want 204", r.Status, r.Body, id)
	}
	// A claim waiting on B gets the task once A resumes the queue.
	resumeHandsTaskToWaitingClaim(t, a, b, id)
}
