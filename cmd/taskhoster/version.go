package main

import "runtime/debug"

// version and commit are stamped by the release build (make release):
//
//	go build -ldflags "-X main.version=v1.2.3 -X main.commit=abc123" ./cmd/taskhoster
//
// A plain `go build` leaves "dev" and, when built from a git checkout, the
// commit Go's build info records.
var (
	version = "dev"
	commit  = ""
)

// versionLine is what `taskhoster --version` prints: "taskhoster VERSION
// (commit C)", or without the commit when neither the build flags nor Go's
// build info know it (a build outside a git checkout, or with -buildvcs=false).
func versionLine() string {
	c := commit
	if c == "" {
		c = vcsRevision()
	}
	if c == "" {
		return "taskhoster " + version
	}
	return "taskhoster " + version + " (commit " + c + ")"
}

// vcsRevision is the commit Go recorded at build time, with "-dirty" when the
// checkout had uncommitted changes.
func vcsRevision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev != "" && modified == "true" {
		rev += "-dirty"
	}
	return rev
}
