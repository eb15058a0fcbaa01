package domain

import (
	"strings"
	"testing"
)

func TestOversizedNumber(t *testing.T) {
	long := strings.Repeat("9", MaxNumberDigits)
	for _, c := range []struct {
		doc, want string
	}{
		{`{"n":1e1000,"m":-1.5E-1000,"k":0.` + long[1:] + `}`, ""},
		{`[` + long + `]`, ""},
		{`{"n":1e1001}`, "1e1001"},
		{`{"n":-2.5E+2000000}`, "-2.5E+2000000"},
		{`{"a":[1,2,` + long + `9]}`, long[:40] + "…"},
		{`{"s":"1e99999 in a string \" 1e99999","t":1e99999}`, "1e99999"},
		{`"1e99999"`, ""},
		{`{"1e99999":true}`, ""},
		{`null`, ""},
	} {
		if got := OversizedNumber([]byte(c.doc)); got != c.want {
			t.Errorf("OversizedNumber(%.60s) = %q, want %q", c.doc, got, c.want)
		}
	}
}

func FuzzOversizedNumber(f *testing.F) {
	for _, s := range []string{`{"n":1e1001}`, `"\\"1e9999"`, `[1,-0.5e-3]`, `{"a":"\""}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		_ = OversizedNumber([]byte(doc)) // never panics, whatever the bytes
	})
}
