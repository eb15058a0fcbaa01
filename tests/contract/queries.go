package contract

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/adapters/schema"
	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// The cases below claim with real claim queries, JSON Schemas as a worker
// sends them, where the others use hand-made matchers: a store may judge
// part of a schema itself (PostgreSQL translates it into SQL), and whatever
// it judges, a claim takes exactly the tasks the schema accepts, in claim
// order.

// Query is a claim query as app makes one: its key is the compacted
// schema, Match applies the schema, and Query gives the schema to a store
// that reads it.
type Query struct {
	text   string
	schema *schema.Schema
}

// NewQuery compiles a claim query.
func NewQuery(tb testing.TB, text string) *Query {
	tb.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(text)); err != nil {
		tb.Fatalf("query %s: %v", text, err)
	}
	s, err := schema.Compile(buf.Bytes())
	if err != nil {
		tb.Fatalf("query %s: %v", text, err)
	}
	return &Query{text: buf.String(), schema: s}
}

func (q *Query) Key() string            { return q.text }
func (q *Query) Query() json.RawMessage { return json.RawMessage(q.text) }

// Match reads an item that a store holds as none (posted as null) as null,
// as app's matcher does.
func (q *Query) Match(item json.RawMessage) bool {
	if len(item) == 0 {
		item = json.RawMessage("null")
	}
	return len(q.schema.Validate(item)) == 0
}

// Accepts is the schema library's verdict on item as it was posted: what
// a claim is to be held to.
func (q *Query) Accepts(item json.RawMessage) bool { return len(q.schema.Validate(item)) == 0 }

// QueryItems are items that tell JSON Schema's rules apart from a
// database's: numbers equal by value, integers written with a fraction,
// absent members, non-objects, text beyond ASCII, and values a database
// may not hold at all (a U+0000, a lone surrogate, a huge exponent).
var QueryItems = []string{
	`{"kind":"image","width":100}`,
	`{"kind":"image","width":100.0}`,
	`{"kind":"image","width":1e2}`,
	`{"kind":"image","width":99.5}`,
	`{"kind":"image","width":"100"}`,
	`{"kind":"video","width":100}`,
	`{"kind":"video"}`,
	`{"width":100}`,
	`{}`,
	`{"kind":null}`,
	`{"kind":["image"]}`,
	`{"kind":{"name":"image"}}`,
	`"image"`,
	`["image"]`,
	`100`,
	`1.0`,
	`true`,
	`{"kind":"imagé","width":-0}`,
	`{"kind":"im\u0061ge","width":100}`,
	`{"kind":"image","size":{"w":1,"h":2}}`,
	`{"kind":"image","size":{"w":1.0,"h":2,"x":3}}`,
	`{"kind":"image","size":{"w":"1"}}`,
	`{"kind":"image","tags":["a","b"]}`,
	`{"kind":"image","tags":["b","a"]}`,
	`{"kind":"image","note":"nul \u0000 inside"}`,
	`{"kind":"image","note":"lone \ud800 surrogate"}`,
	`{"kind":"image","width":1e400}`,
	`{"kind":"image","width":1e200000}`,
	`{"kind":"image","width":12345678901234567890123456789012345678901234567890}`,
	`{"kind":"image","extra":true,"width":100}`,
	`{"kind":"😀","width":3}`,
}

// QuerySchemas are claim queries over QueryItems: the common shapes, and
// the keywords a store may not translate.
var QuerySchemas = []string{
	`{}`,
	`true`,
	`false`,
	`{"properties":{"kind":{"const":"image"}}}`,
	`{"properties":{"kind":{"const":"image"}},"required":["kind"]}`,
	`{"type":"object","properties":{"kind":{"const":"image"}},"required":["kind"]}`,
	`{"type":"object","properties":{"kind":{"enum":["image","video"]}},"required":["kind"]}`,
	`{"properties":{"width":{"const":100}},"required":["width"]}`,
	`{"properties":{"width":{"type":"integer"}}}`,
	`{"properties":{"width":{"type":"integer","minimum":100}},"required":["width"]}`,
	`{"properties":{"width":{"exclusiveMinimum":99.5,"maximum":1e3}}}`,
	`{"properties":{"width":{"exclusiveMaximum":100}}}`,
	`{"properties":{"width":{"minimum":1e300}}}`,
	`{"properties":{"width":{"maximum":12345678901234567890123456789012345678901234567890}}}`,
	`{"type":["string","integer"]}`,
	`{"type":"number"}`,
	`{"type":"array","const":["image"]}`,
	`{"enum":["image",100,null,true,["image"]]}`,
	`{"const":1}`,
	`{"properties":{"kind":{"const":"imagé"}}}`,
	`{"properties":{"kind":{"const":"😀"}}}`,
	`{"type":"object","properties":{"size":{"type":"object","properties":{"w":{"const":1}},"required":["w"]}},"required":["size"]}`,
	`{"properties":{"size":{"properties":{"w":{"type":"integer"},"h":{"minimum":2}},"additionalProperties":false}}}`,
	`{"properties":{"tags":{"const":["a","b"]}},"required":["tags"]}`,
	`{"properties":{"kind":{"const":"image"},"note":{"type":"string"}},"required":["note"]}`,
	`{"allOf":[{"properties":{"kind":{"const":"image"}}},{"required":["width"]}]}`,
	`{"anyOf":[{"properties":{"kind":{"const":"video"}},"required":["kind"]},{"type":"string"}]}`,
	`{"oneOf":[{"required":["kind"]},{"required":["width"]}]}`,
	`{"not":{"required":["kind"]}}`,
	`{"properties":{"kind":{"pattern":"^im"}},"required":["kind"]}`,
	`{"properties":{"kind":{"minLength":6}},"required":["kind"]}`,
	`{"additionalProperties":false,"properties":{"kind":{},"width":{}}}`,
	`{"$defs":{"k":{"const":"image"}},"properties":{"kind":{"$ref":"#/$defs/k"}},"required":["kind"]}`,
	`{"$schema":"http://json-schema.org/draft-07/schema#","properties":{"kind":{"const":"image"}},"required":["kind"]}`,
	`{"$schema":"http://json-schema.org/draft-04/schema#","properties":{"kind":{"const":"image"}},"required":["kind"]}`,
	`{"properties":{"kind":{"const":"image","x-unknown":1}},"required":["kind"],"title":"images"}`,
	`{"properties":{"note":{"const":"nul \u0000 inside"}}}`,
	`{"properties":{"kind":{"type":"string","format":"email"}}}`,
	`{"properties":{"it's":{"const":"a \\ b"}},"required":["it's"]}`,
}

// Every query claims exactly the tasks it accepts, in claim order, and none
// it rejects.
func testClaimQueries(t *testing.T, r ports.TaskRepository) {
	for i, text := range QuerySchemas {
		q := NewQuery(t, text)
		qref := domain.QueueRef{Host: Host, Queue: fmt.Sprintf("q%d", i)}
		var want []string
		for n, item := range QueryItems {
			// Priorities in three bands, so that claim order is not
			// posting order.
			task, _ := domain.Post(ID(n), qref.Host, qref.Queue, json.RawMessage(item), "alice", at(n), domain.PostOptions{Priority: n % 3})
			if err := r.Create(context.Background(), task, nil); err != nil {
				t.Fatalf("create item %d %s: %v", n, item, err)
			}
		}
		for prio := 2; prio >= 0; prio-- {
			for n, item := range QueryItems {
				if n%3 == prio && q.Match(json.RawMessage(item)) {
					want = append(want, ID(n))
				}
			}
		}
		var got []string
		for range len(QueryItems) + 1 {
			task, err := r.ClaimNext(context.Background(), qref, q, at(100), claim("box-1", at(100)), nil)
			if errors.Is(err, domain.ErrNotFound) {
				break
			}
			if err != nil {
				t.Fatalf("query %s: claim: %v", text, err)
			}
			got = append(got, task.ID)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("query %s claimed (-want +got):\n%s", text, diff)
		}
	}
}
