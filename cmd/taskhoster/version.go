package main

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
