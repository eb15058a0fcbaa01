package domain

import "testing"

func TestAuthenticate(t *testing.T) {
	h := &Host{Users: map[string]User{
		"alice":   {Name: "alice", Token: "a11ce0000000000000000000000000a1"},
		"box":     {Name: "box", Token: "b0b0000000000000000000000000b0b0"},
		"refused": {Name: "refused"}, // a refused user file: name, no token
		"carol":   {Name: "carol", Token: "5a4ed0000000000000000000000005a4"},
		"dave":    {Name: "dave", Token: "5a4ed0000000000000000000000005a4"},
	}}
	cases := []struct {
		name, token, want string
		ok                bool
	}{
		{"alice", "a11ce0000000000000000000000000a1", "alice", true},
		{"box", "b0b0000000000000000000000000b0b0", "box", true},
		{"empty token never matches a refused user", "", "", false},
		{"unknown", "00000000000000000000000000000000", "", false},
		{"prefix of a token", "a11ce0000000000000000000000000a", "", false},
		{"token with a suffix", "a11ce0000000000000000000000000a1x", "", false},
		{"upper case", "A11CE0000000000000000000000000A1", "", false},
		// Loading refuses a token two user files share; should two get
		// through all the same, the token names nobody, rather than
		// whichever of them came last (callers use the name alone).
		{"a token two users share", "5a4ed0000000000000000000000005a4", "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := h.Authenticate(c.token)
			if got != c.want || ok != c.ok {
				t.Errorf("Authenticate(%q) = %q, %v; want %q, %v", c.token, got, ok, c.want, c.ok)
			}
		})
	}
}
