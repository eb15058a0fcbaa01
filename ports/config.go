package ports

import (
	"crypto/subtle"
	"encoding/json"

	"github.com/taskhoster/taskhoster/domain"
)

// Schema is a compiled JSON Schema.
type Schema interface {
	// Validate checks a JSON document and lists every violation (none: valid).
	// The document must already be valid JSON.
	Validate(doc json.RawMessage) []domain.Violation
}

// SchemaCompiler compiles the schemas clients send at run time (claim
// queries). It never fetches a remote $ref.
type SchemaCompiler interface {
	Compile(schema json.RawMessage) (Schema, error)
}

// Queue is one served queue: a valid queue file, compiled.
type Queue struct {
	Host     string
	Name     string
	Settings domain.Settings
	Access   domain.Access
	// The compiled schemas, and their source for GET /{queue}.
	Item, Progress, Result          Schema
	ItemRaw, ProgressRaw, ResultRaw json.RawMessage
}

// Ref names q.
func (q *Queue) Ref() QueueRef { return QueueRef{Host: q.Host, Queue: q.Name} }

// User is a host's user. A user refused for a shared token has no token: the
// name still counts in access lists, but nobody can authenticate as it.
type User struct {
	Name  string
	Token string
}

// Host is one served host folder.
type Host struct {
	Name   string
	Queues map[string]*Queue
	Users  map[string]User
}

// Authenticate returns the name of the user whose token this is. Every
// user's token is compared in constant time, so the time taken does not say
// how close a guess came, nor which user it matched.
func (h *Host) Authenticate(token string) (string, bool) {
	if token == "" {
		return "", false
	}
	name, found := "", 0
	for _, u := range h.Users {
		if u.Token == "" {
			continue
		}
		if subtle.ConstantTimeCompare([]byte(u.Token), []byte(token)) == 1 {
			name, found = u.Name, found+1
		}
	}
	return name, found == 1
}

// Config is the live configuration, re-read when the hosts folder changes.
// Each call sees one consistent snapshot of a host.
type Config interface {
	// Host returns the served host whose folder is exactly name, or false.
	// (The HTTP layer drops the port, lower-cases and strips ".localhost".)
	Host(name string) (*Host, bool)
	// Queues lists every served queue of every host, for the sweep.
	Queues() []*Queue
}
