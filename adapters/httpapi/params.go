package httpapi

import (
	"fmt"
	"math"
	"net/url"
	"regexp"
	"strconv"
	"time"

	"github.com/taskhoster/taskhoster/app"
	"github.com/taskhoster/taskhoster/domain"
)

var (
	decimalPattern  = regexp.MustCompile(`^[0-9]{1,12}(\.[0-9]{1,9})?$`)
	unsignedPattern = regexp.MustCompile(`^[0-9]{1,18}$`)
	integerPattern  = regexp.MustCompile(`^[-+]?[0-9]{1,18}$`)
)

// What the post parameters must be, for the messages that name them.
var (
	delayWhat    = fmt.Sprintf("a number of seconds from 0 to %d", domain.MaxDelaySeconds)
	priorityWhat = fmt.Sprintf("an integer from %d to %d", -domain.MaxPriority, domain.MaxPriority)
)

// postOptions reads a post's query parameters (SPEC §11): delay=S (seconds,
// an integer or a decimal, 0 to a year) or notBefore=MS (Unix
// milliseconds), and priority=N. A malformed or out-of-range one is
// invalid_request, naming it; the use case checks the rest (both given, a
// notBefore too far ahead).
func postOptions(query url.Values) (app.PostOptions, error) {
	var opts app.PostOptions
	if v, ok, err := param(query, "delay", decimalPattern, delayWhat); err != nil {
		return opts, err
	} else if ok {
		d, _ := strconv.ParseFloat(v, 64)
		if d > domain.MaxDelaySeconds {
			return opts, badParam("delay", delayWhat)
		}
		opts.DelaySeconds = &d
	}
	if v, ok, err := param(query, "notBefore", unsignedPattern, "a time in Unix milliseconds"); err != nil {
		return opts, err
	} else if ok {
		ms, _ := strconv.ParseInt(v, 10, 64)
		opts.NotBefore = &ms
	}
	if v, ok, err := param(query, "priority", integerPattern, priorityWhat); err != nil {
		return opts, err
	} else if ok {
		n, _ := strconv.ParseInt(v, 10, 64)
		if n < -domain.MaxPriority || n > domain.MaxPriority {
			return opts, badParam("priority", priorityWhat)
		}
		p := int(n)
		opts.Priority = &p
	}
	return opts, nil
}

// param is the one value of query parameter name, if given; it must match
// pattern (what says what it should be).
func param(query url.Values, name string, pattern *regexp.Regexp, what string) (string, bool, error) {
	values, ok := query[name]
	switch {
	case !ok:
		return "", false, nil
	case len(values) != 1 || !pattern.MatchString(values[0]):
		return "", false, badParam(name, what)
	}
	return values[0], true, nil
}

func badParam(name, what string) error {
	return domain.E(domain.KindInvalid, domain.CodeInvalidRequest, "query parameter %s must be given once, as %s", name, what)
}

// seconds turns an optional number of seconds in a body (name) into a
// duration, refusing one outside 0 to max; absent is 0.
func seconds(name string, v *float64, max int64) (time.Duration, error) {
	if v == nil {
		return 0, nil
	}
	if math.IsNaN(*v) || *v < 0 || *v > float64(max) {
		return 0, domain.E(domain.KindInvalid, domain.CodeInvalidRequest, "%s must be a number of seconds from 0 to %d", name, max)
	}
	return time.Duration(*v * float64(time.Second)), nil
}
