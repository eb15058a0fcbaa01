package index

import (
	"testing"

	"github.com/taskhoster/taskhoster/domain"
)

// FuzzParseID checks that the index's id numbers name exactly the valid
// ids, one number each, and turn back into the same id.
func FuzzParseID(f *testing.F) {
	for _, s := range []string{"0123456789abcdef", "ffffffffffffffff", "0000000000000000",
		"0123456789ABCDEF", "0123456789abcde", "0123456789abcdef0", "0123456789abcdeg", "../../../../etc", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		n, ok := parseID(id)
		if ok != domain.ValidID(id) {
			t.Fatalf("parseID(%q) ok = %v, ValidID = %v", id, ok, !ok)
		}
		if ok && formatID(n) != id {
			t.Fatalf("formatID(parseID(%q)) = %q", id, formatID(n))
		}
	})
}
