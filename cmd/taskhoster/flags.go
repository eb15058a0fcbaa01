package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// newFlags makes a flag set for a subcommand that reports errors to stderr
// instead of exiting, so run can return an exit code. Its help (-h, or a
// wrong command line) is "Usage: taskhoster " and synopsis (the command
// line, a blank line, what the command does), then the flags and their
// environment variables.
func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("taskhoster "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { printHelp(fs, synopsis) }
	return fs
}

// printHelp writes fs's help to its output: the synopsis, the flags, and
// the environment variables of those that have one, except the flags named
// in noEnvHere (which this command takes from its command line only).
func printHelp(fs *flag.FlagSet, synopsis string, noEnvHere ...string) {
	w := fs.Output()
	fmt.Fprintf(w, "Usage: taskhoster %s\n\nFlags:\n", synopsis)
	fs.PrintDefaults()
	fmt.Fprint(w, "\nEnvironment (a flag wins):\n")
	fs.VisitAll(func(f *flag.Flag) {
		if noEnv[f.Name] || slices.Contains(noEnvHere, f.Name) {
			return
		}
		fmt.Fprintf(w, "  %-26s --%s\n", envName(f.Name), f.Name)
	})
}

// parse parses args, then fills every flag not given on the command line
// from its environment variable TASKHOSTER_<FLAG> (upper case, dashes as
// underscores): a flag wins over the environment, which wins over the default.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || noEnv[f.Name] || err != nil {
			return
		}
		env := envName(f.Name)
		if v, ok := os.LookupEnv(env); ok {
			if e := f.Value.Set(v); e != nil {
				err = fmt.Errorf("%s=%q: %w", env, v, e)
			}
		}
	})
	return err
}

// noEnv are the flags that describe one call, not a setting: a stray
// TASKHOSTER_KEY in a shell would give every post the same idempotency key
// (and so make one task of them all), a TASKHOSTER_BATCH turn every post
// into a batch, and a TASKHOSTER_STATUS exported for `tasks` would let
// `purge QUEUE` delete without the --status it requires. They come from
// the command line only.
var noEnv = map[string]bool{"key": true, "batch": true, "status": true}

// envName is the environment variable of flag name: TASKHOSTER_<NAME>.
func envName(name string) string {
	return "TASKHOSTER_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}
