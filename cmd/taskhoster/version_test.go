package main

import (
	"bytes"
	"testing"
)

func TestVersionPrintsStampedValues(t *testing.T) {
	defer func(v, c string) { version, commit = v, c }(version, commit)
	version, commit = "v1.2.3", "abc123"
	for _, arg := range []string{"--version", "version"} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{arg}, &stdout, &stderr); code != 0 {
			t.Fatalf("%s: exit %d, stderr %q", arg, code, stderr.String())
		}
		if got, want := stdout.String(), "taskhoster v1.2.3 (commit abc123)\n"; got != want {
			t.Errorf("%s printed %q, want %q", arg, got, want)
		}
	}
}
