package domain

import (
	"crypto/subtle"
	"encoding/json"
)

// The configuration model: what a hosts folder declares, once it is loaded and
// its schemas compiled. The rules on it (who may do what, whose token this
// is) live here with the rest of the domain; reading the folder is
// adapters/folderconfig's job.

// Schema is a compiled JSON Schema.
type Schema interface {
	// Validate checks a JSON document and lists every violation (none: valid).
	// The document must already be valid JSON.
	Validate(doc json.RawMessage) []Violation
}

// Queue is one served queue: a valid queue file, compiled.
type Queue struct {
	Host     string
	Name     string
	Settings Settings
	Access   Access
	// The compiled schemas, and their source for GET /{queue}. Failure
	// checks the reasons of give-backs and failures; FailureRaw is nil
	// unless the queue file gives one.
	Item, Progress, Result, Failure             Schema
	ItemRaw, ProgressRaw, ResultRaw, FailureRaw json.RawMessage
	// Problems, when not empty, say why the queue file on disc is invalid:
	// this is its last valid version, kept in force (SPEC §12), and GET
	// /{queue} and `taskhoster check` report them ("file: /path: reason").
	Problems []string
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

// Authenticate returns the name of the user whose token this is ("" and
// false for none). Every user's token is compared in constant time, so the
// time taken does not say how close a guess came, nor which user it
// matched. A token two users share names neither: callers act on the name
// alone, and it must never be the wrong one.
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
	if found != 1 {
		return "", false
	}
	return name, true
}

// QueueRef names one queue of one host.
type QueueRef struct {
	Host  string
	Queue string
}

// Key names one task.
type Key struct {
	Host  string
	Queue string
	ID    string
}

// Ref is the queue k belongs to.
func (k Key) Ref() QueueRef { return QueueRef{Host: k.Host, Queue: k.Queue} }

// KeyOf is the key of t.
func KeyOf(t Task) Key { return Key{Host: t.Host, Queue: t.Queue, ID: t.ID} }
