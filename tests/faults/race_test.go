//go:build race

package faults

// raceEnabled builds the server under test with the race detector too.
const raceEnabled = true
