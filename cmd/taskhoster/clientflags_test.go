package main

import (
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseArgsTakesFlagsAnywhere(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		positional []string
		exec, conc string
		once       bool
	}{
		{"flags after", []string{"resize", "--exec", "cat", "--once"}, []string{"resize"}, "cat", "1", true},
		{"flags before", []string{"--exec=cat", "--concurrency", "4", "resize"}, []string{"resize"}, "cat", "4", false},
		{"interleaved", []string{"resize", "-once", "--exec", "cat", "x"}, []string{"resize", "x"}, "cat", "1", true},
		{"dash is positional", []string{"q", "-", "--exec", "cat"}, []string{"q", "-"}, "cat", "1", false},
		{"after --", []string{"q", "--", "-5", "--once"}, []string{"q", "-5", "--once"}, "", "1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := newFlags("test", "test", io.Discard)
			exec := fs.String("exec", "", "")
			conc := fs.String("concurrency", "1", "")
			once := fs.Bool("once", false, "")
			got, err := parseArgs(fs, tt.args)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.positional, got); diff != "" {
				t.Errorf("positional (-want +got):\n%s", diff)
			}
			if *exec != tt.exec || *conc != tt.conc || *once != tt.once {
				t.Errorf("exec %q concurrency %q once %v", *exec, *conc, *once)
			}
		})
	}
}

func TestParseArgsEnvironmentAndUnknownFlags(t *testing.T) {
	t.Setenv("TASKHOSTER_TOKEN", "from-env")
	fs := newFlags("test", "test", io.Discard)
	conn := addConnFlags(fs)
	if _, err := parseArgs(fs, []string{"q"}); err != nil {
		t.Fatal(err)
	}
	if conn.token != "from-env" || conn.server != "http://127.0.0.1:8080" {
		t.Errorf("token %q server %q", conn.token, conn.server)
	}
	fs = newFlags("test", "test", io.Discard)
	addConnFlags(fs)
	if _, err := parseArgs(fs, []string{"q", "--nope"}); err == nil {
		t.Error("an unknown flag was accepted")
	}
}

func TestTailBufferKeepsTheEnd(t *testing.T) {
	b := &tailBuffer{max: 5}
	for _, s := range []string{"abc", "defg", "h"} {
		_, _ = b.Write([]byte(s))
	}
	if got := b.String(); got != "defgh" {
		t.Errorf("tail = %q, want %q", got, "defgh")
	}
	c := &cappedBuffer{max: 4}
	_, _ = c.Write([]byte("abc"))
	if n, err := c.Write([]byte("def")); n != 3 || err != nil || c.String() != "abcd" || !c.over {
		t.Errorf("capped: %d %v %q over=%v", n, err, c.String(), c.over)
	}
}
