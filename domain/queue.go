package domain

import (
	"time"
)

// RetainFrom says when a terminal task's retention countdown starts.
type RetainFrom string

const (
	RetainFromFinished RetainFrom = "finished" // at finishedAt, read or not
	RetainFromFetched  RetainFrom = "fetched"  // at fetchedAt; never while unread
)

// Settings are a queue's timings and limits (SPEC §1, "settings").
type Settings struct {
	LeaseSeconds    int64      `json:"leaseSeconds"`
	QueueSeconds    int64      `json:"queueSeconds"`
	RetainSeconds   int64      `json:"retainSeconds"`
	RetainFrom      RetainFrom `json:"retainFrom"`
	ArchivePayloads bool       `json:"taskhoster-archivePayloads"`
	MaxItemBytes    int64      `json:"maxItemBytes"`

	// Retries (SPEC §11), each absent unless the queue file sets it.

	// MaxAttempts bounds the claims of a task: one that comes back after
	// its MaxAttempts-th fails with error "attempts". 0: unlimited.
	MaxAttempts int64 `json:"maxAttempts,omitempty"`
	// RetryBaseSeconds and RetryMaxSeconds shape the backoff of a task
	// that comes back (see Backoff). 0 base: no backoff; 0 max: 3600.
	RetryBaseSeconds int64 `json:"retryBaseSeconds,omitempty"`
	RetryMaxSeconds  int64 `json:"retryMaxSeconds,omitempty"`
}

// DefaultRetryMaxSeconds is RetryMaxSeconds when the queue file gives none.
const DefaultRetryMaxSeconds = 3600

// maxBackoffSeconds keeps a backoff a time.Duration can hold (the queue
// file's limit on the retry settings is far below it).
const maxBackoffSeconds = 1 << 33

// Backoff is how long a task that comes back after its n-th claim waits
// before it may be claimed again: d in [b/2, b] for b = min(retryMax,
// retryBase × 2^(n-1)), jitter (in [0, 1], drawn by the caller) choosing
// where. Zero without a retryBaseSeconds.
func (s Settings) Backoff(n int, jitter float64) time.Duration {
	if s.RetryBaseSeconds <= 0 || n < 1 {
		return 0
	}
	maxSec := s.RetryMaxSeconds
	if maxSec <= 0 {
		maxSec = DefaultRetryMaxSeconds
	}
	sec := maxSec
	if k := n - 1; k < 62 && s.RetryBaseSeconds <= maxSec>>k { // no overflow: base × 2^k ≤ max
		sec = s.RetryBaseSeconds << k
	}
	b := time.Duration(min(sec, maxBackoffSeconds)) * time.Second
	jitter = min(max(jitter, 0), 1)
	return b/2 + time.Duration(float64(b/2)*jitter)
}

// Exhausted reports whether a task claimed attempts times may not be
// claimed again.
func (s Settings) Exhausted(attempts int) bool {
	return s.MaxAttempts > 0 && int64(attempts) >= s.MaxAttempts
}

// DefaultSettings are what a queue file's missing settings become.
func DefaultSettings() Settings {
	return Settings{
		LeaseSeconds:  60,
		QueueSeconds:  86400,
		RetainSeconds: 3600,
		RetainFrom:    RetainFromFinished,
		MaxItemBytes:  1 << 20,
	}
}

// Lease is the length of one lease.
func (s Settings) Lease() time.Duration { return time.Duration(s.LeaseSeconds) * time.Second }

// Action names something a user may do on a queue.
type Action string

const (
	ActionPost   Action = "post"
	ActionStatus Action = "status"
	ActionWork   Action = "work"
	ActionLogs   Action = "logs"
	// ActionManage: list and search tasks, cancel any task, retry and purge
	// dead letters, pause the queue (SPEC §12).
	ActionManage Action = "manage"
)

// Actions lists every action, in the order of a queue file's access block.
var Actions = []Action{ActionPost, ActionStatus, ActionWork, ActionLogs, ActionManage}

// Rule is who may do one action: everyone, or the listed users. The zero Rule
// allows nobody (an action left out of the access block).
type Rule struct {
	Public bool
	Users  []string
}

// Allows reports whether user (empty for anonymous) may act under r.
func (r Rule) Allows(user string) bool {
	if r.Public {
		return true
	}
	if user == "" {
		return false
	}
	for _, u := range r.Users {
		if u == user {
			return true
		}
	}
	return false
}

// Access maps each action to its rule.
type Access map[Action]Rule

// Decision is the outcome of an access check, before it becomes a status code.
type Decision int

const (
	Allowed      Decision = iota
	Unauthorized          // credentials are needed and none (or unknown ones) came
	Forbidden             // a known user who is not on the list
)

// Check decides whether user (empty for a request without a known token) may
// do at least one of the actions.
func (a Access) Check(user string, actions ...Action) Decision {
	for _, act := range actions {
		if a[act].Allows(user) {
			return Allowed
		}
	}
	if user == "" {
		return Unauthorized
	}
	return Forbidden
}

// ValidName reports whether s may name a queue or a user (SPEC §1):
// ^[a-z0-9][a-z0-9_-]{0,62}$. A loop, not a regexp: every request and
// every stored change checks its names (TestNamesAgreeWithTheirPatterns).
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > 63 || !lowerOrDigit(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !lowerOrDigit(c) && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// ValidHost reports whether s may name a host folder: a DNS name of
// [a-z0-9.-] (^[a-z0-9][a-z0-9.-]{0,252}$), no leading dot and no "..", so
// it can never climb out of a folder.
func ValidHost(s string) bool {
	if len(s) == 0 || len(s) > 253 || !lowerOrDigit(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case lowerOrDigit(c), c == '-':
		case c == '.' && s[i-1] != '.':
		default:
			return false
		}
	}
	return true
}

func lowerOrDigit(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' }
