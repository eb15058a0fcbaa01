package schema

import (
	"encoding/json"
	"testing"
)

// The schemas that accept everything compile to Any, which validates
// nothing; every other schema keeps its compiled form, even one whose
// keywords happen to accept everything.
func TestSchemasThatAcceptAllSkipValidation(t *testing.T) {
	for raw, skips := range map[string]bool{
		`{}`: true, ` { } `: true, `true`: true,
		`false`: false, `{"type":"object"}`: false, `{"$comment":"x"}`: false, `{"properties":{}}`: false,
	} {
		s, err := Compile(json.RawMessage(raw))
		if err != nil {
			t.Fatalf("compile %s: %v", raw, err)
		}
		if got := s.spares == nil; got != skips {
			t.Errorf("compile %s: skips validation %v, want %v", raw, got, skips)
		}
	}
	if v := Any().Validate(json.RawMessage(`[1,"x",{"a":null}]`)); v != nil {
		t.Errorf("Any refused a value: %v", v)
	}
}
