package e2e

import (
	"regexp"
	"strings"
	"testing"
)

// TestEveryCommandHelp: -h and --help exit 0 on every command, with a
// help that shows the command line, every flag, and the environment
// variable of every flag that has one, and says nothing of the project's
// issues or spec. No server needed.
func TestEveryCommandHelp(t *testing.T) {
	t.Parallel()
	s := &server{t: t, url: "http://127.0.0.1:1"} // nothing listens there
	// The flags that come from the command line only: one call's key or
	// batch, and the address of logs serve (TASKHOSTER_ADDR is serve's).
	cmdLineOnly := map[string]bool{"key": true, "batch": true, "status": true}
	commands := []struct {
		args []string
		envs []string // some variables the help must list
	}{
		{[]string{"serve"}, []string{"TASKHOSTER_HOSTS", "TASKHOSTER_ADDR", "TASKHOSTER_LOG_LEVEL", "TASKHOSTER_LOG_FORMAT"}},
		{[]string{"check"}, []string{"TASKHOSTER_HOSTS"}},
		{[]string{"bench"}, []string{"TASKHOSTER_RUNS", "TASKHOSTER_SECTIONS"}},
		{[]string{"post"}, []string{"TASKHOSTER_SERVER", "TASKHOSTER_HOST", "TASKHOSTER_TOKEN", "TASKHOSTER_PRIORITY"}},
		{[]string{"status"}, []string{"TASKHOSTER_SERVER", "TASKHOSTER_HOST", "TASKHOSTER_TOKEN"}},
		{[]string{"watch"}, []string{"TASKHOSTER_SERVER", "TASKHOSTER_HOST", "TASKHOSTER_TOKEN"}},
		{[]string{"work"}, []string{"TASKHOSTER_EXEC", "TASKHOSTER_CONCURRENCY", "TASKHOSTER_ON_ERROR"}},
		{[]string{"release"}, []string{"TASKHOSTER_DELAY", "TASKHOSTER_REASON"}},
		{[]string{"fail"}, []string{"TASKHOSTER_REASON", "TASKHOSTER_WORKER"}},
		{[]string{"cancel"}, []string{"TASKHOSTER_TOKEN"}},
		{[]string{"retry"}, []string{"TASKHOSTER_TOKEN"}},
		{[]string{"purge"}, []string{"TASKHOSTER_TOKEN"}},
		{[]string{"pause"}, []string{"TASKHOSTER_TOKEN"}},
		{[]string{"resume"}, []string{"TASKHOSTER_TOKEN"}},
		{[]string{"tasks"}, []string{"TASKHOSTER_LIMIT", "TASKHOSTER_AFTER"}},
		{[]string{"logs", "pull"}, []string{"TASKHOSTER_SERVER", "TASKHOSTER_STORE", "TASKHOSTER_FOLLOW"}},
		{[]string{"logs", "serve"}, []string{"TASKHOSTER_STORE"}},
	}
	flagLine := regexp.MustCompile(`(?m)^  -([a-z][a-z-]*)`)
	envLine := regexp.MustCompile(`(?m)^  (TASKHOSTER_[A-Z_]+) +--([a-z-]+)$`)
	for _, c := range commands {
		for _, help := range []string{"-h", "--help"} {
			name := strings.Join(c.args, " ") + " " + help
			r := s.cli("", append(c.args, help)...)
			text := r.stdout + r.stderr
			if r.code != 0 {
				t.Errorf("%s: exit %d, want 0:\n%s", name, r.code, text)
				continue
			}
			if !strings.Contains(text, "Usage: taskhoster "+strings.Join(c.args, " ")) {
				t.Errorf("%s: no usage line:\n%s", name, text)
			}
			noIssues(t, name, text)
			listed := map[string]string{} // flag -> its variable
			for _, m := range envLine.FindAllStringSubmatch(text, -1) {
				listed[m[2]] = m[1]
			}
			for _, env := range c.envs {
				if !strings.Contains(text, "  "+env+" ") {
					t.Errorf("%s does not list %s:\n%s", name, env, text)
				}
			}
			flags := flagLine.FindAllStringSubmatch(text, -1)
			if len(flags) == 0 {
				t.Errorf("%s lists no flags:\n%s", name, text)
			}
			for _, m := range flags {
				f := m[1]
				want := "TASKHOSTER_" + strings.ToUpper(strings.ReplaceAll(f, "-", "_"))
				switch {
				case cmdLineOnly[f] || c.args[0] == "logs" && c.args[1] == "serve" && f == "addr":
					if listed[f] != "" {
						t.Errorf("%s lists %s, which the command does not read", name, listed[f])
					}
				case listed[f] != want:
					t.Errorf("%s: flag --%s has variable %q in the help, want %s", name, f, listed[f], want)
				}
			}
		}
	}
	// The command lists and logs' own help.
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}, {"logs", "-h"}} {
		r := s.cli("", args...)
		if r.code != 0 || r.stdout == "" {
			t.Errorf("%v: exit %d, stdout %q", args, r.code, r.stdout)
		}
		noIssues(t, strings.Join(args, " "), r.stdout+r.stderr)
	}
	// A wrong command line still exits 2, with the help on stderr.
	for _, args := range [][]string{{"serve", "--nope"}, {"check", "extra"}, {"bench", "--nope"}} {
		if r := s.cli("", args...); r.code != 2 || !strings.Contains(r.stderr, "Usage: taskhoster "+args[0]) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and the usage", args, r.code, r.stderr)
		}
	}
}

// noIssues fails t if a help text speaks of the project's own papers
// (an issue, a section of the spec) instead of to its user.
func noIssues(t *testing.T, name, text string) {
	t.Helper()
	if m := regexp.MustCompile(`(?i)\bissues?\b|§|\bSPEC\b`).FindString(text); m != "" {
		t.Errorf("%s: the help mentions %q:\n%s", name, m, text)
	}
}
