package domain

import (
	"regexp"
	"strings"
	"testing"
)

// The grammars as SPEC §1 writes them. ValidName, ValidHost and ValidID
// are loops for speed; these patterns are what they must agree with.
var (
	namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	hostPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{0,252}$`)
	idPattern   = regexp.MustCompile(`^[0-9a-f]{16}$`)
)

func patternHost(s string) bool { return hostPattern.MatchString(s) && !strings.Contains(s, "..") }

// nameCases are near misses of every grammar: lengths at and past the
// limits, each class's neighbours in ASCII, and bytes that are not ASCII.
var nameCases = []string{
	"", "a", "0", "-", "_", ".", "a-", "a_", "a.", ".a", "-a", "_a", "A", "aB", "a b", "a\n", "\na",
	"a/b", "a\\b", "..", "a..b", "a.b", "a.-b", "é", "aé", "a\x00", "a`", "a{", "a@", "a[", "a:", "a/",
	strings.Repeat("a", 62), strings.Repeat("a", 63), strings.Repeat("a", 64),
	strings.Repeat("a", 252), strings.Repeat("a", 253), strings.Repeat("a", 254),
	"0123456789abcdef", "0123456789abcde", "0123456789abcdef0", "0123456789ABCDEF", "0123456789abcdeg",
	"0123456789abcde/", "0123456789abcde:", "0123456789abcde`", "0123456789abcde\n",
}

func TestNamesAgreeWithTheirPatterns(t *testing.T) {
	for _, s := range nameCases {
		checkNames(t, s)
	}
	for c := 0; c < 256; c++ { // every byte, alone and after a valid first one
		checkNames(t, string(rune(c)))
		checkNames(t, "a"+string([]byte{byte(c)}))
		checkNames(t, "0123456789abcde"+string([]byte{byte(c)}))
	}
}

func FuzzNamesAgreeWithTheirPatterns(f *testing.F) {
	for _, s := range nameCases {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { checkNames(t, s) })
}

func checkNames(t *testing.T, s string) {
	t.Helper()
	if got, want := ValidName(s), namePattern.MatchString(s); got != want {
		t.Errorf("ValidName(%q) = %v, the pattern says %v", s, got, want)
	}
	if got, want := ValidHost(s), patternHost(s); got != want {
		t.Errorf("ValidHost(%q) = %v, the pattern says %v", s, got, want)
	}
	if got, want := ValidID(s), idPattern.MatchString(s); got != want {
		t.Errorf("ValidID(%q) = %v, the pattern says %v", s, got, want)
	}
}
