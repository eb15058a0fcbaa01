package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/taskhoster/taskhoster/client"
)

// TestOnFailureFollowsOnError: a failed command's reason keeps both
// tails; --on-error picks a Release, a Failure or the older error result.
func TestOnFailureFollowsOnError(t *testing.T) {
	stderr, stdout := &tailBuffer{max: 8}, &tailBuffer{max: 8}
	_, _ = stderr.Write([]byte("it broke\n"))
	_, _ = stdout.Write([]byte("not json"))
	reason := commandFailure{ExitCode: 3, Stderr: "t broke\n", Stdout: "not json"}
	for _, tt := range []struct {
		onError string
		result  string
		wantE   error
	}{
		{onError: "release", result: "null", wantE: client.Release{Reason: reason}},
		{onError: "fail", result: "null", wantE: client.Failure{Reason: reason}},
		{onError: "result", result: `{"error":{"exitCode":3,"stderr":"t broke\n"}}`},
	} {
		result, err := (&execHandler{onError: tt.onError}).onFailure(3, stderr, stdout)
		got, _ := json.Marshal(result)
		if string(got) != tt.result || fmt.Sprint(err) != fmt.Sprint(tt.wantE) {
			t.Errorf("%s: result %s, error %v; want %s, %v", tt.onError, got, err, tt.result, tt.wantE)
		}
		if tt.wantE != nil && fmt.Sprintf("%+v", err) != fmt.Sprintf("%+v", tt.wantE) {
			t.Errorf("%s: %+v, want %+v", tt.onError, err, tt.wantE)
		}
	}
}

func TestOutcomeOf(t *testing.T) {
	for _, tt := range []struct {
		o    client.Outcome
		want string
		bad  bool
	}{
		{client.Outcome{Sent: "result", Ack: client.Ack{Accepted: true}}, "finished", false},
		{client.Outcome{Sent: "release", Ack: client.Ack{Accepted: true, Status: "pending"}}, "released", false},
		{client.Outcome{Sent: "release", Ack: client.Ack{Accepted: true, Status: "failed"}}, "failed", false},
		{client.Outcome{Sent: "fail", Ack: client.Ack{Accepted: true}}, "failed", false},
		{client.Outcome{Sent: "result", Ack: client.Ack{Status: "finished"}}, "refused", false},
		{client.Outcome{Sent: "release", Err: &client.Error{Code: "invalid_failure"}}, "refused", true},
		{client.Outcome{Err: fmt.Errorf("handler: %w", context.Canceled)}, "abandoned", true},
		{client.Outcome{Err: errors.New("run the command: no sh")}, "refused", true},
	} {
		if got, bad := outcomeOf(tt.o); got != tt.want || bad != tt.bad {
			t.Errorf("outcomeOf(%+v) = %s, %v; want %s, %v", tt.o, got, bad, tt.want, tt.bad)
		}
	}
}
