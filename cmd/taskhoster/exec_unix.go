//go:build unix

package main

import (
	"os/exec"
	"syscall"
)

// ownProcessGroup starts the command in a process group of its own, so a
// Ctrl-C at the terminal (sent to the whole foreground group) reaches the
// worker, which finishes its tasks, and not the commands running them; and
// so that stopping a task kills everything its shell started.
func ownProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}

// exitCode is the command's exit status, or 128+N for a command killed by
// signal N, as a shell reports it.
func exitCode(exit *exec.ExitError) int {
	if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return exit.ExitCode()
}
