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

// Each Validate needs a compiled copy of its own. Once as many calls have
// run at once as ever will (up to maxSpares), every copy made is kept, so
// the hot path (every post, result and claim validates) compiles nothing
// more.
func TestSparesFollowThePeakOfConcurrentCalls(t *testing.T) {
	s, err := Compile(json.RawMessage(`{"type":"object","properties":{"a":{"pattern":"^x"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	const n = 16 // more than GOMAXPROCS on most machines, as a preempted call makes it
	for round := range 3 {
		held := make([]*compiled, 0, n)
		for range n {
			c, err := s.take()
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, c)
		}
		for _, c := range held {
			s.put(c)
		}
		if got := s.made.Load(); got != n {
			t.Fatalf("after round %d of %d calls at once: %d copies compiled, want %d", round, n, got, n)
		}
	}
}
