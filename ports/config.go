package ports

import (
	"encoding/json"

	"github.com/taskhoster/taskhoster/domain"
)

// SchemaCompiler compiles the schemas clients send at run time (claim
// queries). It never fetches a remote $ref.
type SchemaCompiler interface {
	Compile(schema json.RawMessage) (domain.Schema, error)
}

// Config is the live configuration, re-read when the hosts folder changes.
// Each call sees one consistent snapshot of a host.
type Config interface {
	// Host returns the served host whose folder is exactly name, or false.
	// (The HTTP layer drops the port, lower-cases and strips ".localhost".)
	Host(name string) (*domain.Host, bool)
	// Queues lists every served queue of every host, for the sweep.
	Queues() []*domain.Queue
}
