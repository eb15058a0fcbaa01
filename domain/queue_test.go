package domain

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestDefaultSettings(t *testing.T) {
	s := DefaultSettings()
	want := Settings{LeaseSeconds: 60, QueueSeconds: 86400, RetainSeconds: 3600, RetainFrom: "finished", MaxItemBytes: 1048576}
	if s != want {
		t.Errorf("DefaultSettings() = %+v, want %+v", s, want)
	}
	if got := s.Lease(); got != time.Minute {
		t.Errorf("Lease() = %v, want 1m", got)
	}
}

func TestAccessCheck(t *testing.T) {
	// The seed's queue file: post public, status alice, work box, logs alice.
	access := Access{
		ActionPost:   {Public: true},
		ActionStatus: {Users: []string{"alice"}},
		ActionWork:   {Users: []string{"box", "carol"}},
		ActionLogs:   {Users: []string{"alice"}},
	}
	noLogs := Access{
		ActionPost:   {Users: []string{"alice"}},
		ActionStatus: {Users: []string{"alice"}},
	}
	emptyList := Access{ActionWork: {Users: []string{}}}
	tests := []struct {
		name    string
		access  Access
		user    string
		actions []Action
		want    Decision
	}{
		{"public, anonymous", access, "", []Action{ActionPost}, Allowed},
		{"public, any user", access, "box", []Action{ActionPost}, Allowed},
		{"listed user", access, "alice", []Action{ActionStatus}, Allowed},
		{"second listed user", access, "carol", []Action{ActionWork}, Allowed},
		{"unlisted user", access, "box", []Action{ActionStatus}, Forbidden},
		{"unknown user name", access, "mallory", []Action{ActionWork}, Forbidden},
		{"anonymous on a non-public action", access, "", []Action{ActionStatus}, Unauthorized},
		{"names are case-sensitive", access, "Alice", []Action{ActionStatus}, Forbidden},
		{"action left out: a user", noLogs, "alice", []Action{ActionLogs}, Forbidden},
		{"action left out: anonymous", noLogs, "", []Action{ActionWork}, Unauthorized},
		{"empty list allows nobody", emptyList, "box", []Action{ActionWork}, Forbidden},
		{"no access block at all", nil, "alice", []Action{ActionPost}, Forbidden},
		{"any of several actions: one allows", access, "box", []Action{ActionPost, ActionStatus, ActionWork, ActionLogs}, Allowed},
		{"any of several actions: user allowed by a later one", access, "alice", []Action{ActionWork, ActionLogs}, Allowed},
		{"any of several actions: none allow a user", access, "box", []Action{ActionStatus, ActionLogs}, Forbidden},
		{"any of several actions: none allow anonymous", access, "", []Action{ActionStatus, ActionWork, ActionLogs}, Unauthorized},
		{"no actions", access, "alice", nil, Forbidden},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.access.Check(tc.user, tc.actions...); got != tc.want {
				t.Errorf("Check(%q, %v) = %v, want %v", tc.user, tc.actions, got, tc.want)
			}
		})
	}
}

func TestRuleAllows(t *testing.T) {
	tests := []struct {
		name string
		rule Rule
		user string
		want bool
	}{
		{"zero rule, user", Rule{}, "alice", false},
		{"zero rule, anonymous", Rule{}, "", false},
		{"public, anonymous", Rule{Public: true}, "", true},
		{"listed", Rule{Users: []string{"alice"}}, "alice", true},
		{"unlisted", Rule{Users: []string{"alice"}}, "bob", false},
		{"an empty name in the list does not admit anonymous", Rule{Users: []string{""}}, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.rule.Allows(tc.user); got != tc.want {
				t.Errorf("Allows(%q) = %v, want %v", tc.user, got, tc.want)
			}
		})
	}
}

func TestActions(t *testing.T) {
	want := []Action{"post", "status", "work", "logs", "manage"}
	if fmt.Sprint(Actions) != fmt.Sprint(want) {
		t.Errorf("Actions = %v, want %v", Actions, want)
	}
}

func TestValidName(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{"resize", true},
		{"alice", true},
		{"a", true},
		{"0", true},
		{"box-1", true},
		{"thumb_nail", true},
		{"9lives", true},
		{strings.Repeat("a", 63), true},
		{strings.Repeat("a", 64), false},
		{"", false},
		{"Resize", false},
		{"ALICE", false},
		{"-resize", false},
		{"_resize", false},
		{".resize", false},
		{"resize.json", false},
		{"..", false},
		{".", false},
		{"../x", false},
		{"a/b", false},
		{`a\b`, false},
		{"a b", false},
		{"résumé", false},
		{"resize\n", false},
		{"resize\x00", false},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%q", tc.name), func(t *testing.T) {
			if got := ValidName(tc.name); got != tc.want {
				t.Errorf("ValidName(%q) = %v, want %v", tc.name, got, tc.want)
			}
		})
	}
}

func TestValidHost(t *testing.T) {
	tests := []struct {
		host string
		want bool
	}{
		{"task.example.com", true},
		{"localhost", true},
		{"a", true},
		{"127.0.0.1", true},
		{"my-host.example", true},
		{"xn--bcher-kva.example", true},
		{strings.Repeat("a", 253), true},
		{strings.Repeat("a", 254), false},
		{"", false},
		{".", false},
		{"..", false},
		{"../x", false},
		{"a/../b", false},
		{"a..b", false},
		{"a...b", false},
		{".example.com", false},
		{"-example.com", false},
		{"Task.Example.com", false},
		{"task.example.com:8080", false},
		{"task example.com", false},
		{"task_example.com", false},
		{"a/b", false},
		{`a\b`, false},
		{"host\n", false},
		{"host\x00", false},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%q", tc.host), func(t *testing.T) {
			if got := ValidHost(tc.host); got != tc.want {
				t.Errorf("ValidHost(%q) = %v, want %v", tc.host, got, tc.want)
			}
		})
	}
}
