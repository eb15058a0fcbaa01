//go:build !unix

package main

import "os/exec"

// ownProcessGroup: elsewhere the command stays in the worker's group.
func ownProcessGroup(*exec.Cmd) {}

func exitCode(exit *exec.ExitError) int { return exit.ExitCode() }
