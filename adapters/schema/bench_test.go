package schema_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// BenchmarkValidate is the hot path: a post checked against its queue's
// item schema (the example thumbnail queue's), an item of about 1 KiB.
func BenchmarkValidate(b *testing.B) {
	s := mustCompile(b, `{
		"type": "object",
		"required": ["url"],
		"properties": {
			"url":    {"type": "string"},
			"format": {"enum": ["jpg", "png", "webp"]},
			"width":  {"type": "integer", "minimum": 1, "maximum": 10000}
		}
	}`)
	var meta []string
	for i := range 24 {
		meta = append(meta, fmt.Sprintf(`"key-%02d":"value number %02d"`, i, i))
	}
	doc := json.RawMessage(`{"url":"https://images.example.com/albums/2026/holiday/` + strings.Repeat("p", 200) +
		`.jpg","format":"webp","width":640,"meta":{` + strings.Join(meta, ",") + `}}`)
	if len(doc) < 900 || len(doc) > 1200 {
		b.Fatalf("the item is %d bytes, want about 1 KiB", len(doc))
	}
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if v := s.Validate(doc); v != nil {
			b.Fatal(v)
		}
	}
}
