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
	return fs
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
		if given[f.Name] || err != nil {
			return
		}
		env := "TASKHOSTER_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok {
			if e := f.Value.Set(v); e != nil {
				err = fmt.Errorf("%s=%q: %w", env, v, e)
			}
		}
	})
	return err
}
