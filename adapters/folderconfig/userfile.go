package folderconfig

import (
	"fmt"
	"sort"
	"strings"
)

// validToken accepts the one token form: 32 lower-case hex characters.
// Requiring 128 bits keeps guessable tokens ("secret", "1234") out.
func validToken(s string) bool {
	if len(s) != 32 {
		return false
	}
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// parseUser reads one user file and returns its token, or "" when the file is
// refused. Nothing it reports ever quotes the token: the messages describe
// what is wrong with it, never its value.
func parseUser(name string, data []byte, r *fileReport) string {
	if reason, bad := syntaxError(data, false); bad {
		r.fail("", reason)
		return ""
	}
	members, dup, ok := object(data)
	if !ok {
		r.fail("", `a user file must hold one JSON object {"name": ..., "token": ...}`)
		return ""
	}
	if dup != "" {
		r.fail(pointer("", dup), "the key appears more than once")
	}
	var token string
	var hasName, hasToken bool
	for _, m := range members {
		at := pointer("", m.key)
		switch m.key {
		case "name":
			hasName = true
			if v, _ := value(m.value).(string); v != name {
				r.fail(at, fmt.Sprintf("must be %q, the file's name without .json", name))
			}
		case "token":
			hasToken = true
			v, _ := value(m.value).(string)
			if !validToken(v) {
				r.fail(at, "must be 32 lower-case hex characters")
			}
			token = v
		default:
			r.fail(at, `unknown key (a user file has exactly "name" and "token")`)
		}
	}
	if !hasName {
		r.fail("", `missing "name"`)
	}
	if !hasToken {
		r.fail("", `missing "token"`)
	}
	if r.failed {
		return ""
	}
	return token
}

// refuseSharedTokens empties the token of every user whose token another user
// of the host also has, and reports each of those files. A shared token
// cannot say who is calling, so neither user may use it.
func refuseSharedTokens(tokens map[string]string, reports map[string]*fileReport) {
	byToken := map[string][]string{}
	for name, tok := range tokens {
		if tok != "" {
			byToken[tok] = append(byToken[tok], name)
		}
	}
	for _, names := range byToken {
		if len(names) < 2 {
			continue
		}
		sort.Strings(names)
		for _, name := range names {
			others := make([]string, 0, len(names)-1)
			for _, o := range names {
				if o != name {
					others = append(others, o)
				}
			}
			reports[name].fail("/token", "the same token is used by "+strings.Join(others, ", ")+"; all of them are refused")
			tokens[name] = ""
		}
	}
}
