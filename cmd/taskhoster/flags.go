package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// newFlags makes a flag set for a subcommand that reports errors to stderr
// instead of exiting, so run can return an exit code.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("taskhoster "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage of %s:\n", fs.Name())
		fs.PrintDefaults()
		printEnv(fs, stderr)
	}
	return fs
}

// printEnv lists the environment variable of every flag of fs.
func printEnv(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprint(w, "\nEnvironment (a flag wins):\n")
	fs.VisitAll(func(f *flag.Flag) {
		if noEnv[f.Name] {
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
// into a batch. They come from the command line only.
var noEnv = map[string]bool{"key": true, "batch": true}

// envName is the environment variable of flag name: TASKHOSTER_<NAME>.
func envName(name string) string {
	return "TASKHOSTER_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}
