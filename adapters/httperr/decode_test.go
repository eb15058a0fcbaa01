package httperr

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/taskhoster/taskhoster/domain"
)

type envelope struct {
	Worker *string         `json:"worker"`
	Wait   *float64        `json:"wait"`
	Max    *int            `json:"max"`
	Query  json.RawMessage `json:"query"`
	Ready  bool            `json:"ready"`
	Tags   []string        `json:"tags"`
}

func TestDecode(t *testing.T) {
	cases := []struct {
		name, data string
		code       domain.Code
		message    string
	}{
		{"unknown field", `{"wiat":1}`, domain.CodeInvalidRequest, `unknown field "wiat" (the body takes worker, wait, max, query, ready, tags)`},
		{"string for a number", `{"wait":"5"}`, domain.CodeInvalidJSON, `"wait" must be a number, not a string`},
		{"fraction for an integer", `{"max":2.5}`, domain.CodeInvalidJSON, `"max" must be an integer, not 2.5`},
		{"number out of range", `{"wait":1e400}`, domain.CodeInvalidJSON, `"wait" is a number too large to hold: 1e400`},
		{"bool for a string", `{"worker":true}`, domain.CodeInvalidJSON, `"worker" must be a string, not true or false`},
		{"object for a list", `{"tags":{}}`, domain.CodeInvalidJSON, `"tags" must be an array, not an object`},
		{"number in a list of strings", `{"tags":["a",1]}`, domain.CodeInvalidJSON, `"tags" must be a string, not a number`},
		{"string for true or false", `{"ready":"yes"}`, domain.CodeInvalidJSON, `"ready" must be true or false, not a string`},
		{"array for the whole", `[]`, domain.CodeInvalidJSON, `the body must be an object, not an array`},
		{"syntax", `{"wait" 1}`, domain.CodeInvalidJSON, `the body is not valid JSON: invalid character '1' after object key (at byte 9)`},
		{"cut short", `{"wait":1`, domain.CodeInvalidJSON, `the body is not valid JSON: it ends before its value does`},
		{"trailing", `{}x`, domain.CodeInvalidJSON, `the body must be one JSON object, with nothing after it`},
		{"empty", ``, domain.CodeInvalidJSON, `the body is empty: it must be a JSON object`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var v envelope
			err := Decode([]byte(c.data), &v, "the body")
			reply := Of(err)
			if reply.Status != 400 || reply.Body.Error != c.code || reply.Body.Message != c.message {
				t.Errorf("got %d %s %q\nwant 400 %s %q", reply.Status, reply.Body.Error, reply.Body.Message, c.code, c.message)
			}
		})
	}
	var v envelope
	if err := Decode([]byte(" {\"worker\":\"w\",\"query\":{\"any\":[1]}}\n "), &v, "the body"); err != nil || *v.Worker != "w" || string(v.Query) != `{"any":[1]}` {
		t.Errorf("a good body: %v %+v", err, v)
	}
}

func TestMarshalDoesNotEscapeHTML(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`<b>&amp;</b>`, `"<b>&amp;</b>"`},
		{`\u003c`, `"\\u003c"`}, // the text of an escape, not one
		{`\<`, `"\\<"`},
		{"\u2028", `"\u2028"`}, // still escaped: JavaScript would end a line there
	} {
		got, err := Marshal(map[string]any{"s": c.in, "raw": json.RawMessage(`"` + strings.ReplaceAll(c.want[1:len(c.want)-1], `\u2028`, `\u2028`) + `"`)})
		if err != nil {
			t.Fatal(err)
		}
		want := `{"raw":` + c.want + `,"s":` + c.want + `}`
		if string(got) != want {
			t.Errorf("%q: got %s, want %s", c.in, got, want)
		}
	}
}

// FuzzUnescapeHTML: undoing the HTML escapes never changes what the JSON
// says, and leaves none of them.
func FuzzUnescapeHTML(f *testing.F) {
	for _, s := range []string{`<b>&</b>`, `\u003c`, `\\u003c`, `\`, "a\u2028b", `"<"`, "\xff<"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := Marshal([]any{s, map[string]string{s: s}})
		if err != nil {
			t.Fatal(err)
		}
		var back []any
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%q: %s is not JSON: %v", s, b, err)
		}
		want, _ := json.Marshal([]any{s, map[string]string{s: s}})
		var wantBack []any
		_ = json.Unmarshal(want, &wantBack)
		got, _ := json.Marshal(back)
		if want, _ := json.Marshal(wantBack); string(got) != string(want) {
			t.Errorf("%q: %s reads back as %s, want %s", s, b, got, want)
		}
		for _, esc := range []string{`\u003c`, `\u003e`, `\u0026`} {
			if strings.Contains(strings.ReplaceAll(string(b), `\\`, ""), esc) {
				t.Errorf("%q: %s still holds %s", s, b, esc)
			}
		}
	})
}
