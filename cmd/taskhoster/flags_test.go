package main

import (
	"flag"
	"io"
	"strings"
	"testing"
)

// A flag that describes one call never comes from the environment; a
// setting does.
func TestPerCallFlagsIgnoreTheEnvironment(t *testing.T) {
	t.Setenv("TASKHOSTER_KEY", "stray")
	t.Setenv("TASKHOSTER_BATCH", "true")
	t.Setenv("TASKHOSTER_STATUS", "failed")
	t.Setenv("TASKHOSTER_SERVER", "http://127.0.0.1:1")
	fs := flag.NewFlagSet("post", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	key := fs.String("key", "", "")
	batch := fs.Bool("batch", false, "")
	status := fs.String("status", "", "") // purge's, which it requires
	server := fs.String("server", "", "")
	if err := parse(fs, nil); err != nil {
		t.Fatal(err)
	}
	if *key != "" || *batch || *status != "" {
		t.Errorf("key %q, batch %v, status %q taken from the environment", *key, *batch, *status)
	}
	if *server != "http://127.0.0.1:1" {
		t.Errorf("server %q, want it from TASKHOSTER_SERVER", *server)
	}
	var help strings.Builder
	fs.SetOutput(&help)
	printHelp(fs, "post")
	if strings.Contains(help.String(), "TASKHOSTER_KEY") || !strings.Contains(help.String(), "TASKHOSTER_SERVER") {
		t.Errorf("help lists:\n%s", help.String())
	}
}
