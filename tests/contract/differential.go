package contract

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/taskhoster/taskhoster/domain"
	"github.com/taskhoster/taskhoster/ports"
)

// The tables below cross claim queries with items, keyword by keyword, so
// that every place that decides whether a pending task matches a query
// (the file store's views, PostgreSQL's translation into SQL, app's
// matcher) can be held to the schema library's verdict on every pair: a
// store that refuses a task the schema accepts leaves a claim waiting
// beside it, one that takes a task the schema refuses hands a worker a
// task it cannot handle.

// DiffItems are the items of the differential tables.
var DiffItems = []string{
	// Scalars at the root, null among them.
	`null`, `true`, `false`, `0`, `1`, `1.0`, `1e0`, `10e-1`, `-0`, `0.5`, `2`, `3`, `-1`,
	`9007199254740993`, `9007199254740992`, `9007199254740993.0`, `1e400`, `-1e400`, `1e-400`,
	`""`, `"a"`, `"é"`, `"e\u0301"`, `"😀"`, `"😀😀"`, `"ab"`, `"abc"`, `"\u00e9"`, `"a\"b"`, `"a\\b"`, `"\n"`, `"\u2028"`,
	`"2024-01-02"`, `"not a date"`, `"a@b.c"`,
	`[]`, `[1]`, `[1,2]`, `[1,"a"]`, `[1,1]`, `[1,1.0]`, `[[1]]`, `[{"a":1}]`, `[null]`,
	// Objects: members present, absent, of every type.
	`{}`, `{"a":null}`, `{"a":1}`, `{"a":1.0}`, `{"a":1e0}`, `{"a":"1"}`, `{"a":true}`, `{"a":[1]}`, `{"a":{}}`,
	`{"a":{"b":1}}`, `{"a":{"b":"x"}}`, `{"a":{"b":{"c":1}}}`, `{"a":[{"b":1}]}`,
	`{"a":1,"b":2}`, `{"a":1,"c":3}`, `{"b":2}`, `{"a":2.5}`, `{"a":3}`, `{"a":-1}`, `{"a":0.30000000000000004}`,
	`{"a":9007199254740993}`, `{"a":9007199254740992}`, `{"a":12345678901234567890123456789}`, `{"a":1e400}`,
	`{"a":"😀"}`, `{"a":"😀😀"}`, `{"a":"é"}`, `{"a":"e\u0301"}`, `{"a":"ab"}`, `{"a":"a\"b"}`, `{"a":"a\\b"}`, `{"a":"it's"}`,
	`{"a":"\u0000"}`, `{"a":"\ud83d\ude00"}`, `{"a":"x\u0041"}`, `{"a":"xA"}`,
	`{"a":[1,2,3]}`, `{"a":[3,2,1]}`, `{"a":[1,"x"]}`, `{"a":[]}`, `{"a":["x"]}`,
	`{"a b":1}`, `{"a'b":1}`, `{"a\"b":1}`, `{"é":1}`, `{"":1}`,
	`{"kind":"image","a":1}`, `{"kind":"video","a":2}`, `{"kind":"image","size":{"w":1,"h":2}}`,
	`{"a":1,"a":2}`, `{"a":"x","a":1}`,
	// Numbers the library cannot compare (big.Rat refuses the exponent):
	// refused by every query that compares them, never a panic.
	`{"a":1e2000000}`, `[1e-2000000,1e-2000000]`,
}

// DiffQueries are the claim queries of the differential tables: each
// keyword alone and in the combinations a worker writes.
var DiffQueries = []string{
	// type
	`{"type":"null"}`, `{"type":"boolean"}`, `{"type":"object"}`, `{"type":"array"}`, `{"type":"string"}`,
	`{"type":"number"}`, `{"type":"integer"}`, `{"type":["integer","null"]}`, `{"type":["object","null"]}`,
	`{"type":["string","number"]}`, `{"properties":{"a":{"type":"integer"}},"required":["a"]}`,
	`{"properties":{"a":{"type":"null"}},"required":["a"]}`, `{"properties":{"a":{"type":["number","string"]}}}`,
	// const and enum
	`{"const":null}`, `{"const":1}`, `{"const":1.0}`, `{"const":1e0}`, `{"const":"a"}`, `{"const":"é"}`, `{"const":"e\u0301"}`,
	`{"const":[1]}`, `{"const":[1.0,2]}`, `{"const":{}}`, `{"const":{"a":1}}`, `{"const":9007199254740993}`,
	`{"enum":[null,1,"a"]}`, `{"enum":[[1],{"a":1}]}`, `{"enum":[1e400]}`,
	`{"properties":{"a":{"const":1}},"required":["a"]}`, `{"properties":{"a":{"const":1}}}`,
	`{"type":"object","properties":{"a":{"const":1.0}},"required":["a"]}`,
	`{"properties":{"a":{"const":9007199254740993}},"required":["a"]}`,
	`{"properties":{"a":{"const":9007199254740992}},"required":["a"]}`,
	`{"properties":{"a":{"const":null}},"required":["a"]}`, `{"properties":{"a":{"const":null}}}`,
	`{"properties":{"a":{"const":"a\"b"}},"required":["a"]}`, `{"properties":{"a":{"const":"a\\b"}},"required":["a"]}`,
	`{"properties":{"a":{"const":"it's"}},"required":["a"]}`, `{"properties":{"a":{"const":"😀"}},"required":["a"]}`,
	`{"properties":{"a":{"const":"\ud83d\ude00"}},"required":["a"]}`, `{"properties":{"a":{"const":"x\u0041"}},"required":["a"]}`,
	`{"properties":{"a":{"const":[1,2,3]}},"required":["a"]}`, `{"properties":{"a":{"const":[]}},"required":["a"]}`,
	`{"properties":{"a":{"const":{}}},"required":["a"]}`, `{"properties":{"a":{"const":{"b":1}}},"required":["a"]}`,
	`{"properties":{"a":{"enum":[1,"1",[1],null]}},"required":["a"]}`, `{"properties":{"a":{"enum":[1e400,-1]}}}`,
	`{"properties":{"a":{"const":1}},"required":["a"],"type":"object"}`,
	// required, properties, nesting
	`{"required":["a"]}`, `{"required":["a","b"]}`, `{"required":[]}`, `{"required":["a b"]}`, `{"required":["a'b"]}`,
	`{"required":["a\"b"]}`, `{"required":["é"]}`, `{"required":[""]}`,
	`{"properties":{"a":false}}`, `{"properties":{"a":true}}`, `{"properties":{"a":{}}}`,
	`{"properties":{"a":{"properties":{"b":{"const":1}},"required":["b"]}},"required":["a"]}`,
	`{"type":"object","properties":{"a":{"type":"object","properties":{"b":{"const":1}},"required":["b"]}},"required":["a"]}`,
	`{"properties":{"a":{"properties":{"b":{"properties":{"c":{"const":1}},"required":["c"]}}}}}`,
	`{"properties":{"a":{"required":["b"]}}}`, `{"properties":{"a b":{"const":1}},"required":["a b"]}`,
	`{"properties":{"a'b":{"const":1}},"required":["a'b"]}`, `{"properties":{"é":{"const":1}},"required":["é"]}`,
	`{"properties":{"":{"const":1}},"required":[""]}`,
	`{"properties":{"kind":{"const":"image"},"size":{"properties":{"w":{"const":1.0}}}},"required":["kind"]}`,
	// arrays
	`{"items":{"type":"integer"}}`, `{"type":"array","items":{"const":1}}`, `{"prefixItems":[{"const":1}]}`,
	`{"prefixItems":[{"const":1}],"items":false}`, `{"minItems":2}`, `{"maxItems":1}`, `{"uniqueItems":true}`,
	`{"contains":{"const":1}}`, `{"contains":{"type":"string"},"minContains":1,"maxContains":1}`,
	`{"properties":{"a":{"items":{"type":"number"},"minItems":1}},"required":["a"]}`,
	`{"properties":{"a":{"contains":{"const":"x"}}}}`,
	// numbers
	`{"minimum":1}`, `{"maximum":1}`, `{"exclusiveMinimum":1}`, `{"exclusiveMaximum":1}`, `{"minimum":1.0}`, `{"minimum":1e0}`,
	`{"minimum":9007199254740993}`, `{"maximum":9007199254740992}`, `{"minimum":1e400}`, `{"maximum":-1e400}`,
	`{"exclusiveMinimum":0,"exclusiveMaximum":1}`, `{"multipleOf":1}`, `{"multipleOf":0.1}`, `{"multipleOf":2}`, `{"multipleOf":1e-400}`,
	`{"properties":{"a":{"minimum":1}}}`, `{"properties":{"a":{"minimum":1}},"required":["a"]}`,
	`{"properties":{"a":{"exclusiveMinimum":1,"maximum":3}},"required":["a"]}`,
	`{"properties":{"a":{"maximum":9007199254740992}},"required":["a"]}`,
	`{"properties":{"a":{"minimum":9007199254740993}},"required":["a"]}`,
	`{"properties":{"a":{"multipleOf":0.1}},"required":["a"]}`, `{"properties":{"a":{"type":"integer","minimum":1.5}}}`,
	// strings
	`{"minLength":1}`, `{"maxLength":1}`, `{"minLength":2}`, `{"maxLength":2}`, `{"pattern":"^a"}`, `{"pattern":"^.$"}`,
	`{"pattern":"^\\p{L}$"}`, `{"pattern":"é"}`, `{"format":"date"}`, `{"format":"email"}`,
	`{"properties":{"a":{"maxLength":1}},"required":["a"]}`, `{"properties":{"a":{"minLength":2}},"required":["a"]}`,
	`{"properties":{"a":{"pattern":"^.$"}}}`, `{"properties":{"a":{"type":"string","format":"date"}}}`,
	// combinators
	`{"allOf":[{"required":["a"]},{"properties":{"a":{"const":1}}}]}`, `{"anyOf":[{"const":1},{"const":"a"}]}`,
	`{"anyOf":[{"required":["a"]},{"required":["b"]}]}`, `{"oneOf":[{"required":["a"]},{"required":["b"]}]}`,
	`{"oneOf":[{"type":"integer"},{"type":"number"}]}`, `{"not":{"type":"object"}}`, `{"not":{"required":["a"]}}`,
	`{"not":{"const":1}}`, `{"not":true}`, `{"not":false}`, `{"allOf":[true,false]}`, `{"anyOf":[false,{"type":"null"}]}`,
	`{"anyOf":[{"properties":{"a":{"const":1}},"required":["a"]},{"type":"array"}]}`,
	`{"properties":{"a":{"anyOf":[{"type":"string"},{"minimum":2}]}},"required":["a"]}`,
	`{"properties":{"a":{"not":{"type":"integer"}}},"required":["a"]}`,
	// conditionals and object keywords
	`{"if":{"required":["a"]},"then":{"required":["b"]},"else":{"type":"array"}}`,
	`{"if":{"properties":{"a":{"const":1}}},"then":{"required":["b"]}}`, `{"if":false,"else":{"const":1}}`,
	`{"additionalProperties":false}`, `{"additionalProperties":false,"properties":{"a":{}}}`,
	`{"additionalProperties":{"type":"integer"}}`, `{"patternProperties":{"^a":{"type":"integer"}}}`,
	`{"propertyNames":{"maxLength":1}}`, `{"minProperties":2}`, `{"maxProperties":1}`,
	`{"dependentRequired":{"a":["b"]}}`, `{"dependentSchemas":{"a":{"required":["b"]}}}`,
	`{"unevaluatedProperties":false,"properties":{"a":{}}}`,
	// references, drafts, annotations
	`{"$defs":{"one":{"const":1}},"properties":{"a":{"$ref":"#/$defs/one"}},"required":["a"]}`,
	`{"$ref":"#/$defs/obj","$defs":{"obj":{"type":"object"}}}`,
	`{"$schema":"http://json-schema.org/draft-07/schema#","properties":{"a":{"const":1}},"required":["a"]}`,
	`{"$schema":"http://json-schema.org/draft-07/schema#","format":"date"}`,
	`{"$schema":"http://json-schema.org/draft-04/schema#","properties":{"a":{"minimum":1,"exclusiveMinimum":true}}}`,
	`{"$schema":"https://json-schema.org/draft/2019-09/schema","properties":{"a":{"const":1}},"required":["a"]}`,
	`{"title":"t","description":"d","default":1,"examples":[1],"$comment":"c","properties":{"a":{"const":1,"deprecated":true}},"required":["a"]}`,
	`{"x-unknown":1,"properties":{"a":{"const":1}}}`,
}

// testClaimQueriesDifferential posts every item of DiffItems to a queue of
// its own per query and claims with the query until nothing is left: the
// tasks claimed are exactly the items the schema accepts, in claim order.
func testClaimQueriesDifferential(t *testing.T, r ports.TaskRepository) {
	ctx := context.Background()
	var items []string
	for _, item := range DiffItems {
		// Items a post cannot hold (no queue reads them) are left out.
		task, _ := domain.Post(ID(0), Host, Queue, json.RawMessage(item), "alice", at(0))
		if _, err := domain.DecodeTask(domain.EncodeTask(task)); err == nil {
			items = append(items, item)
		}
	}
	for i, text := range DiffQueries {
		q := NewQuery(t, text)
		qref := domain.QueueRef{Host: Host, Queue: fmt.Sprintf("d%d", i)}
		var want []string
		for n, item := range items {
			task, _ := domain.Post(ID(n), qref.Host, qref.Queue, json.RawMessage(item), "alice", at(n))
			if err := r.Create(ctx, task, nil); err != nil {
				t.Fatalf("create item %d %s: %v", n, item, err)
			}
			if q.Accepts(json.RawMessage(item)) {
				want = append(want, ID(n))
			}
		}
		var got []string
		for range len(items) + 1 {
			task, err := r.ClaimNext(ctx, qref, q, at(len(items)), claim("box-1", at(len(items))), nil)
			if errors.Is(err, domain.ErrNotFound) {
				break
			}
			if err != nil {
				t.Fatalf("query %s: claim: %v", text, err)
			}
			got = append(got, task.ID)
		}
		if missing, extra := differ(want, got), differ(got, want); len(missing)+len(extra) > 0 {
			t.Errorf("query %s:\n  accepted but not claimed: %s\n  claimed but refused: %s", text, itemsOf(items, missing), itemsOf(items, extra))
		} else if strings.Join(want, " ") != strings.Join(got, " ") {
			t.Errorf("query %s claimed %v, want %v (claim order)", text, got, want)
		}
	}
}

// differ lists the ids of a that b lacks.
func differ(a, b []string) []string {
	in := map[string]bool{}
	for _, id := range b {
		in[id] = true
	}
	var out []string
	for _, id := range a {
		if !in[id] {
			out = append(out, id)
		}
	}
	return out
}

// itemsOf names the items of ids, which are ID(n) of items[n].
func itemsOf(items []string, ids []string) string {
	var out []string
	for _, id := range ids {
		for n, item := range items {
			if ID(n) == id {
				out = append(out, item)
			}
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "  ")
}
