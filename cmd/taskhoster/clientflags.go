package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/taskhoster/taskhoster/client"
)

// connFlags are the flags every client command takes, each also
// an environment variable: TASKHOSTER_SERVER, TASKHOSTER_HOST,
// TASKHOSTER_TOKEN.
type connFlags struct{ server, host, token string }

func addConnFlags(fs *flag.FlagSet) *connFlags {
	f := &connFlags{}
	fs.StringVar(&f.server, "server", "http://127.0.0.1:8080", "the server's `URL`")
	fs.StringVar(&f.host, "host", "", "the Host header to send, which picks the host folder (default: the URL's host)")
	fs.StringVar(&f.token, "token", "", "the user's bearer `token`")
	return f
}

func (f *connFlags) client() *client.Client {
	var opts []client.Option
	if f.host != "" {
		opts = append(opts, client.WithHost(f.host))
	}
	if f.token != "" {
		opts = append(opts, client.WithToken(f.token))
	}
	return client.New(f.server, opts...)
}

// clientFlags makes the flag set of a client command with its usage line.
func clientFlags(name, synopsis string, stderr io.Writer) (*flag.FlagSet, *connFlags) {
	fs := newFlags(name, synopsis, stderr)
	return fs, addConnFlags(fs)
}

// parseArgs parses flags that may come before, between or after the
// positional arguments (`work resize --exec cat` as well as
// `work --exec cat resize`), with parse's environment fallback, and returns
// the positional arguments. Everything after "--" is positional, for an
// ITEM that starts with a dash.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var flags, positional []string
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" {
			positional = append(positional, args[i+1:]...)
			break
		}
		if len(arg) < 2 || arg[0] != '-' {
			positional = append(positional, arg) // "-" alone means stdin
			continue
		}
		flags = append(flags, arg)
		name := strings.TrimLeft(arg, "-")
		if strings.Contains(name, "=") {
			continue
		}
		// A flag that takes a value takes the next argument with it.
		f := fs.Lookup(name)
		if f == nil || isBool(f) || i+1 == len(args) {
			continue // an unknown flag is reported by parse
		}
		flags = append(flags, args[i+1])
		i++
	}
	if err := parse(fs, flags); err != nil {
		return nil, err
	}
	return positional, nil
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// flagError is the exit code for a command line parseArgs refused: 0 for
// -h, else 2. The flag package has printed its own complaint and the
// usage; a bad environment value has not been printed yet.
func flagError(fs *flag.FlagSet, stderr io.Writer, err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if strings.HasPrefix(err.Error(), "TASKHOSTER_") {
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
	}
	return 2
}

// badUsage reports a wrong command line with the usage and returns 2.
func badUsage(fs *flag.FlagSet, stderr io.Writer, format string, args ...any) int {
	fmt.Fprintf(stderr, "%s: %s\n", fs.Name(), fmt.Sprintf(format, args...))
	fs.Usage()
	return 2
}

// fail prints err to stderr and returns exit code 1. A server's error
// shows its code, status and message, and each schema violation on a line
// of its own.
func fail(stderr io.Writer, cmd string, err error) int {
	msg := err.Error()
	var e *client.Error
	if errors.As(err, &e) && len(e.Details) > 0 {
		bare := *e
		bare.Details = nil
		msg = strings.Replace(msg, e.Error(), bare.Error(), 1)
	}
	fmt.Fprintf(stderr, "taskhoster %s: %s\n", cmd, msg)
	if e != nil {
		for _, v := range e.Details {
			path := v.Path
			if path == "" {
				path = "(the whole value)"
			}
			fmt.Fprintf(stderr, "  %s: %s\n", path, v.Message)
		}
	}
	return 1
}
