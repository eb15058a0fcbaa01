package folderconfig

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/taskhoster/taskhoster/adapters/schema"
	"github.com/taskhoster/taskhoster/domain"
)

// Upper bounds of the numeric settings. They are far beyond any sensible
// queue, and small enough that now + seconds, or a byte count, can never
// overflow an int64 or a time.Duration.
const (
	maxSeconds      = 10 * 365 * 24 * 60 * 60 // ten years
	maxMaxItemBytes = 64 << 20                // 64 MiB
	maxMaxAttempts  = 1_000_000
)

// anySchemaRaw is what GET /{queue} shows for a progress or result schema
// that the queue file leaves out: the empty schema, which every draft reads
// as "any JSON value". Each queue gets its own copy.
func anySchemaRaw() json.RawMessage { return json.RawMessage(`{}`) }

// parseQueue reads one queue file. It reports every problem it finds (not
// just the first, so `check` shows them all at once) and returns nil when any
// of them is an error. users is the set of user names the host defines.
func parseQueue(host, name string, data []byte, users map[string]bool, r *fileReport) *domain.Queue {
	if reason, bad := syntaxError(data, true); bad {
		r.fail("", reason)
		return nil
	}
	members, dup, ok := object(data)
	if !ok {
		r.fail("", "a queue file must hold one JSON object")
		return nil
	}
	if dup != "" {
		r.fail(pointer("", dup), "the key appears more than once")
	}

	q := &domain.Queue{
		Host:        host,
		Name:        name,
		Settings:    domain.DefaultSettings(),
		Access:      domain.Access{},
		Progress:    schema.Any(),
		Result:      schema.Any(),
		Failure:     schema.Any(),
		ProgressRaw: anySchemaRaw(),
		ResultRaw:   anySchemaRaw(),
	}
	hasItem := false
	for _, m := range members {
		at := pointer("", m.key)
		switch m.key {
		case "item":
			hasItem = true
			q.Item, q.ItemRaw = compileSchema(m.value, at, r)
		case "progress":
			q.Progress, q.ProgressRaw = compileSchema(m.value, at, r)
		case "result":
			q.Result, q.ResultRaw = compileSchema(m.value, at, r)
		case "failure":
			q.Failure, q.FailureRaw = compileSchema(m.value, at, r)
		case "settings":
			parseSettings(m.value, at, &q.Settings, r)
		case "access":
			parseAccess(m.value, at, users, q.Access, r)
		default:
			r.fail(at, "unknown key (a queue file has item, progress, result, failure, settings and access)")
		}
	}
	if !hasItem {
		r.fail("", `missing "item": every queue needs a JSON Schema for its items`)
	}
	if r.failed {
		return nil
	}
	return q
}

// compileSchema compiles one of the queue's schemas. On failure it reports
// the compiler's reason at the schema's key and returns a nil schema, which
// is never served because the report has failed.
func compileSchema(raw json.RawMessage, at string, r *fileReport) (domain.Schema, json.RawMessage) {
	s, err := schema.Compile(raw)
	if err != nil {
		r.fail(at, err.Error())
		return nil, nil
	}
	return s, raw
}

func parseSettings(raw json.RawMessage, at string, s *domain.Settings, r *fileReport) {
	members, dup, ok := object(raw)
	if !ok {
		r.fail(at, "settings must be an object")
		return
	}
	if dup != "" {
		r.fail(pointer(at, dup), "the key appears more than once")
	}
	for _, m := range members {
		key := pointer(at, m.key)
		v := value(m.value)
		switch m.key {
		case "leaseSeconds":
			s.LeaseSeconds = positiveInt(v, maxSeconds, key, r)
		case "queueSeconds":
			s.QueueSeconds = positiveInt(v, maxSeconds, key, r)
		case "retainSeconds":
			s.RetainSeconds = positiveInt(v, maxSeconds, key, r)
		case "maxItemBytes":
			s.MaxItemBytes = positiveInt(v, maxMaxItemBytes, key, r)
		case "maxAttempts":
			s.MaxAttempts = positiveInt(v, maxMaxAttempts, key, r)
		case "retryBaseSeconds":
			s.RetryBaseSeconds = positiveInt(v, maxSeconds, key, r)
		case "retryMaxSeconds":
			s.RetryMaxSeconds = positiveInt(v, maxSeconds, key, r)
		case "retainFrom":
			switch str, _ := v.(string); domain.RetainFrom(str) {
			case domain.RetainFromFinished, domain.RetainFromFetched:
				s.RetainFrom = domain.RetainFrom(str)
			default:
				r.fail(key, fmt.Sprintf(`must be "finished" or "fetched", got %s`, describe(v)))
			}
		case "taskhoster-archivePayloads":
			b, isBool := v.(bool)
			if !isBool {
				r.fail(key, "must be true or false, got "+describe(v))
			}
			s.ArchivePayloads = b
		default:
			r.fail(key, "unknown setting (known: leaseSeconds, queueSeconds, retainSeconds, retainFrom, taskhoster-archivePayloads, maxItemBytes, maxAttempts, retryBaseSeconds, retryMaxSeconds)")
		}
	}
}

// positiveInt accepts a JSON number written as a whole number from 1 to max.
// "60", 1.5, 1e3, 0, -1 and null are all refused: a setting is read by
// people, and one spelling per value avoids surprises.
func positiveInt(v any, limit int64, at string, r *fileReport) int64 {
	num, isNum := v.(json.Number)
	n, err := strconv.ParseInt(string(num), 10, 64)
	if !isNum || err != nil || n < 1 || n > limit {
		r.fail(at, fmt.Sprintf("must be a whole number from 1 to %d, got %s", limit, describe(v)))
		return 0
	}
	return n
}

func parseAccess(raw json.RawMessage, at string, users map[string]bool, access domain.Access, r *fileReport) {
	members, dup, ok := object(raw)
	if !ok {
		r.fail(at, "access must be an object")
		return
	}
	if dup != "" {
		r.fail(pointer(at, dup), "the key appears more than once")
	}
	for _, m := range members {
		key := pointer(at, m.key)
		if !isAction(m.key) {
			r.fail(key, "unknown action (known: "+knownActions()+")")
			continue
		}
		switch v := value(m.value).(type) {
		case string:
			if v != "public" {
				r.fail(key, fmt.Sprintf(`must be "public" or a list of user names, got %q`, v))
				continue
			}
			access[domain.Action(m.key)] = domain.Rule{Public: true}
		case []any:
			rule := domain.Rule{Users: []string{}}
			for i, el := range v {
				elAt := pointer(key, strconv.Itoa(i))
				name, isString := el.(string)
				switch {
				case !isString:
					r.fail(elAt, "must be a user name, got "+kind(el))
				case !users[name]:
					r.fail(elAt, fmt.Sprintf("user %q is not defined (no taskhoster-users/%s.json in this host)", name, name))
				default:
					rule.Users = append(rule.Users, name)
				}
			}
			access[domain.Action(m.key)] = rule
		default:
			r.fail(key, `must be "public" or a list of user names, got `+kind(v))
		}
	}
}

// knownActions lists domain.Actions, for the message that refuses another.
func knownActions() string {
	names := make([]string, len(domain.Actions))
	for i, a := range domain.Actions {
		names[i] = string(a)
	}
	return strings.Join(names, ", ")
}

func isAction(s string) bool {
	for _, a := range domain.Actions {
		if string(a) == s {
			return true
		}
	}
	return false
}

// describe shows a decoded setting value in a message: short values as
// written, anything else by its type.
func describe(v any) string {
	switch v := v.(type) {
	case json.Number:
		return string(v)
	case string:
		if len(v) <= 40 && !strings.ContainsAny(v, "\n\r") {
			return strconv.Quote(v)
		}
	case bool:
		return strconv.FormatBool(v)
	}
	return kind(v)
}
