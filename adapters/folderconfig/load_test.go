package folderconfig_test

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/taskhoster/taskhoster/adapters/folderconfig"
	"github.com/taskhoster/taskhoster/domain"
)

const (
	host        = "task.example.com"
	aliceToken  = "0123456789abcdef0123456789abcdef"
	boxToken    = "fedcba9876543210fedcba9876543210"
	otherToken  = "00000000000000000000000000000001"
	queuesDir   = host + "/taskhoster-queues/"
	usersDir    = host + "/taskhoster-users/"
	resizeFile  = queuesDir + "resize.json"
	minimalItem = `{"item": {"type": "object"}}`
)

// goodTree is a hosts folder without a single problem: two hosts, two users,
// a queue with every key and one with only its item schema.
func goodTree() map[string]string {
	return map[string]string{
		usersDir + "alice.json": `{"name": "alice", "token": "` + aliceToken + `"}`,
		usersDir + "box.json":   `{"name": "box", "token": "` + boxToken + `"}`,
		resizeFile: `{
			"item": {"type": "object", "required": ["url"], "properties": {"url": {"type": "string"}}},
			"progress": {"type": "object", "properties": {"percent": {"type": "number"}}},
			"result": {"type": "object"},
			"settings": {
				"leaseSeconds": 30,
				"queueSeconds": 600,
				"retainSeconds": 7200,
				"retainFrom": "fetched",
				"taskhoster-archivePayloads": true,
				"maxItemBytes": 4096
			},
			"access": {"post": "public", "status": ["alice"], "work": ["box", "alice"], "logs": []}
		}`,
		queuesDir + "thumbnail.json":                       minimalItem,
		"other.example.org/taskhoster-queues/mail.json":    minimalItem,
		"other.example.org/taskhoster-users/.keep.example": "", // a warning, checked below
	}
}

// writeTree creates files under dir; a value of "<dir>" makes a folder.
func writeTree(tb testing.TB, dir string, files map[string]string) {
	tb.Helper()
	for rel, content := range files {
		path := filepath.Join(dir, filepath.FromSlash(rel))
		if content == "<dir>" {
			if err := os.MkdirAll(path, 0o755); err != nil {
				tb.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
}

func mustLoad(tb testing.TB, files map[string]string) (string, *folderconfig.Snapshot, []folderconfig.Problem) {
	tb.Helper()
	dir := tb.TempDir()
	writeTree(tb, dir, files)
	snap, problems := folderconfig.Load(dir)
	for _, p := range problems {
		for _, tok := range []string{aliceToken, boxToken, otherToken} {
			if strings.Contains(p.String(), tok) || strings.Contains(p.String(), tok[:16]) {
				tb.Errorf("problem %q reveals a token", p)
			}
		}
	}
	return dir, snap, problems
}

func served(snap *folderconfig.Snapshot) []string {
	var names []string
	for _, q := range snap.Queues() {
		names = append(names, q.Host+"/"+q.Name)
	}
	return names
}

func TestLoadGoodFolder(t *testing.T) {
	dir, snap, problems := mustLoad(t, goodTree())

	// The only problem is the stray file, a warning.
	want := []folderconfig.Problem{{
		File:    filepath.Join(dir, "other.example.org", "taskhoster-users", ".keep.example"),
		Reason:  "ignored: a user file is named NAME.json, NAME matching ^[a-z0-9][a-z0-9_-]{0,62}$",
		Warning: true,
	}}
	if diff := cmp.Diff(want, problems); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	if folderconfig.HasErrors(problems) {
		t.Errorf("HasErrors = true for a warning only")
	}

	if diff := cmp.Diff([]string{"other.example.org/mail", host + "/resize", host + "/thumbnail"}, served(snap)); diff != "" {
		t.Errorf("served queues (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"other.example.org", host}, snap.Hosts()); diff != "" {
		t.Errorf("hosts (-want +got):\n%s", diff)
	}

	h, ok := snap.Host(host)
	if !ok {
		t.Fatalf("Host(%q) not found", host)
	}
	if _, ok := snap.Host("TASK.example.com"); ok {
		t.Errorf("Host is matched exactly; the HTTP layer lower-cases")
	}

	resize := h.Queues["resize"]
	wantSettings := domain.Settings{LeaseSeconds: 30, QueueSeconds: 600, RetainSeconds: 7200,
		RetainFrom: domain.RetainFromFetched, ArchivePayloads: true, MaxItemBytes: 4096}
	if diff := cmp.Diff(wantSettings, resize.Settings); diff != "" {
		t.Errorf("resize settings (-want +got):\n%s", diff)
	}
	wantAccess := domain.Access{
		domain.ActionPost:   {Public: true},
		domain.ActionStatus: {Users: []string{"alice"}},
		domain.ActionWork:   {Users: []string{"box", "alice"}},
		domain.ActionLogs:   {Users: []string{}},
	}
	if diff := cmp.Diff(wantAccess, resize.Access); diff != "" {
		t.Errorf("resize access (-want +got):\n%s", diff)
	}
	if resize.Ref() != (domain.QueueRef{Host: host, Queue: "resize"}) {
		t.Errorf("resize.Ref() = %v", resize.Ref())
	}
	if v := resize.Item.Validate(json.RawMessage(`{"url": 1}`)); len(v) != 1 || v[0].Path != "/url" {
		t.Errorf("resize item schema: violations %v, want one at /url", v)
	}
	if v := resize.Progress.Validate(json.RawMessage(`{"percent": "half"}`)); len(v) != 1 {
		t.Errorf("resize progress schema: violations %v, want one", v)
	}

	thumb := h.Queues["thumbnail"]
	if diff := cmp.Diff(domain.DefaultSettings(), thumb.Settings); diff != "" {
		t.Errorf("thumbnail settings are not the defaults (-want +got):\n%s", diff)
	}
	for _, a := range domain.Actions {
		if d := thumb.Access.Check("alice", a); d != domain.Forbidden {
			t.Errorf("thumbnail: action %s left out allows alice (%v), want nobody", a, d)
		}
	}
	for _, doc := range []string{`null`, `"x"`, `{"any": [1]}`} {
		if v := thumb.Progress.Validate(json.RawMessage(doc)); v != nil {
			t.Errorf("default progress schema refuses %s: %v", doc, v)
		}
		if v := thumb.Result.Validate(json.RawMessage(doc)); v != nil {
			t.Errorf("default result schema refuses %s: %v", doc, v)
		}
	}
	if string(thumb.ProgressRaw) != `{}` || string(thumb.ResultRaw) != `{}` {
		t.Errorf("default schema sources = %s, %s; want {}", thumb.ProgressRaw, thumb.ResultRaw)
	}
	if !strings.Contains(string(thumb.ItemRaw), `"object"`) {
		t.Errorf("ItemRaw = %s, want the file's item schema", thumb.ItemRaw)
	}
}

func TestAuthenticate(t *testing.T) {
	_, snap, _ := mustLoad(t, goodTree())
	h, _ := snap.Host(host)
	tests := []struct {
		name, token, user string
		ok                bool
	}{
		{"alice", aliceToken, "alice", true},
		{"box", boxToken, "box", true},
		{"unknown token", otherToken, "", false},
		{"empty token", "", "", false},
		{"upper-case copy", strings.ToUpper(aliceToken), "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			user, ok := h.Authenticate(tt.token)
			if user != tt.user || ok != tt.ok {
				t.Errorf("Authenticate = %q, %v; want %q, %v", user, ok, tt.user, tt.ok)
			}
		})
	}
	other, _ := snap.Host("other.example.org")
	if _, ok := other.Authenticate(aliceToken); ok {
		t.Errorf("alice's token works on another host")
	}
}

// wantProblem is a problem as a test states it: the file relative to the
// hosts folder, and a part of the reason.
type wantProblem struct {
	file, jsonPath, reason string
	warning                bool
}

func TestLoadProblems(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string // laid over goodTree; "" deletes
		want  []wantProblem
		// served lists the queues of host that are still served.
		served []string
	}{
		{
			name:   "bad JSON gives line and column",
			files:  map[string]string{resizeFile: "{\n  \"item\": {},\n  oops\n}"},
			want:   []wantProblem{{resizeFile, "", "invalid JSON at line 3, column 3 (byte 18): invalid character 'o'", false}},
			served: []string{"thumbnail"},
		},
		{
			name:   "truncated JSON",
			files:  map[string]string{resizeFile: `{"item": {`},
			want:   []wantProblem{{resizeFile, "", "invalid JSON at line 1, column 11", false}},
			served: []string{"thumbnail"},
		},
		{
			name:   "empty file",
			files:  map[string]string{resizeFile: ``},
			want:   []wantProblem{{resizeFile, "", "invalid JSON at line 1, column 1", false}},
			served: []string{"thumbnail"},
		},
		{
			name:   "not an object",
			files:  map[string]string{resizeFile: `[]`},
			want:   []wantProblem{{resizeFile, "", "must hold one JSON object", false}},
			served: []string{"thumbnail"},
		},
		{
			name:   "item missing",
			files:  map[string]string{resizeFile: `{"result": {}}`},
			want:   []wantProblem{{resizeFile, "", `missing "item"`, false}},
			served: []string{"thumbnail"},
		},
		{
			name:   "unknown top-level key",
			files:  map[string]string{resizeFile: `{"item": {}, "priority": 3}`},
			want:   []wantProblem{{resizeFile, "/priority", "unknown key", false}},
			served: []string{"thumbnail"},
		},
		{
			name:   "duplicate key",
			files:  map[string]string{resizeFile: `{"item": {}, "access": {}, "access": {"post": "public"}}`},
			want:   []wantProblem{{resizeFile, "/access", "more than once", false}},
			served: []string{"thumbnail"},
		},
		{
			name:   "item schema does not compile",
			files:  map[string]string{resizeFile: `{"item": {"type": "colour"}}`},
			want:   []wantProblem{{resizeFile, "/item", "invalid schema: at /type: ", false}},
			served: []string{"thumbnail"},
		},
		{
			name:   "progress schema with a remote ref",
			files:  map[string]string{resizeFile: `{"item": {}, "progress": {"$ref": "http://127.0.0.1:1/x"}}`},
			want:   []wantProblem{{resizeFile, "/progress", "never fetched", false}},
			served: []string{"thumbnail"},
		},
		{
			name:   "result schema with a file ref",
			files:  map[string]string{resizeFile: `{"item": {}, "result": {"$ref": "file:///etc/passwd"}}`},
			want:   []wantProblem{{resizeFile, "/result", "never fetched", false}},
			served: []string{"thumbnail"},
		},
		{
			name: "every bad number",
			files: map[string]string{resizeFile: `{"item": {}, "settings": {
				"leaseSeconds": 0, "queueSeconds": -5, "retainSeconds": 1.5, "maxItemBytes": "60"}}`},
			want: []wantProblem{
				{resizeFile, "/settings/leaseSeconds", "must be a whole number from 1 to 315360000, got 0", false},
				{resizeFile, "/settings/queueSeconds", "got -5", false},
				{resizeFile, "/settings/retainSeconds", "got 1.5", false},
				{resizeFile, "/settings/maxItemBytes", `from 1 to 67108864, got "60"`, false},
			},
			served: []string{"thumbnail"},
		},
		{
			name: "null, exponent and too large",
			files: map[string]string{resizeFile: `{"item": {}, "settings": {
				"leaseSeconds": null, "queueSeconds": 1e3, "retainSeconds": 315360001, "maxItemBytes": 99999999999999999999}}`},
			want: []wantProblem{
				{resizeFile, "/settings/leaseSeconds", "got null", false},
				{resizeFile, "/settings/queueSeconds", "got 1e3", false},
				{resizeFile, "/settings/retainSeconds", "got 315360001", false},
				{resizeFile, "/settings/maxItemBytes", "got 99999999999999999999", false},
			},
			served: []string{"thumbnail"},
		},
		{
			name:   "unknown setting",
			files:  map[string]string{resizeFile: `{"item": {}, "settings": {"leaseSecs": 60}}`},
			want:   []wantProblem{{resizeFile, "/settings/leaseSecs", "unknown setting", false}},
			served: []string{"thumbnail"},
		},
		{
			name:  "retainFrom and archivePayloads",
			files: map[string]string{resizeFile: `{"item": {}, "settings": {"retainFrom": "never", "taskhoster-archivePayloads": "yes"}}`},
			want: []wantProblem{
				{resizeFile, "/settings/retainFrom", `must be "finished" or "fetched", got "never"`, false},
				{resizeFile, "/settings/taskhoster-archivePayloads", `must be true or false, got "yes"`, false},
			},
			served: []string{"thumbnail"},
		},
		{
			name:   "settings not an object",
			files:  map[string]string{resizeFile: `{"item": {}, "settings": 60}`},
			want:   []wantProblem{{resizeFile, "/settings", "must be an object", false}},
			served: []string{"thumbnail"},
		},
		{
			name:   "undefined user in access",
			files:  map[string]string{resizeFile: `{"item": {}, "access": {"work": ["box", "carol"]}}`},
			want:   []wantProblem{{resizeFile, "/access/work/1", `user "carol" is not defined`, false}},
			served: []string{"thumbnail"},
		},
		{
			name: "bad access entries",
			files: map[string]string{resizeFile: `{"item": {}, "access": {
				"post": "private", "status": 1, "work": ["alice", 7], "delete": "public", "a/b": []}}`},
			want: []wantProblem{
				{resizeFile, "/access/post", `must be "public" or a list of user names, got "private"`, false},
				{resizeFile, "/access/status", "got a number", false},
				{resizeFile, "/access/work/1", "must be a user name, got a number", false},
				{resizeFile, "/access/delete", "unknown action (known: post, status, work, logs, manage)", false},
				{resizeFile, "/access/a~1b", "unknown action", false},
			},
			served: []string{"thumbnail"},
		},
		{
			name:  "user file named differently",
			files: map[string]string{usersDir + "alice.json": `{"name": "alicia", "token": "` + aliceToken + `"}`},
			want:  []wantProblem{{usersDir + "alice.json", "/name", `must be "alice"`, false}},
			// alice still counts as a defined name: resize, which lists
			// her, stays served.
			served: []string{"resize", "thumbnail"},
		},
		{
			name:   "malformed token",
			files:  map[string]string{usersDir + "alice.json": `{"name": "alice", "token": "` + strings.ToUpper(aliceToken) + `"}`},
			want:   []wantProblem{{usersDir + "alice.json", "/token", "must be 32 lower-case hex characters", false}},
			served: []string{"resize", "thumbnail"},
		},
		{
			name:  "user file with an extra key and no token",
			files: map[string]string{usersDir + "alice.json": `{"name": "alice", "admin": true}`},
			want: []wantProblem{
				{usersDir + "alice.json", "/admin", "unknown key", false},
				{usersDir + "alice.json", "", `missing "token"`, false},
			},
			served: []string{"resize", "thumbnail"},
		},
		{
			name: "user file with bad JSON does not quote it",
			files: map[string]string{usersDir + "alice.json": `{"name": "alice", "token": "` + aliceToken[:16] + "\n" +
				aliceToken[16:] + `"}`},
			want:   []wantProblem{{usersDir + "alice.json", "", "invalid JSON at line 1, column 45 (byte 44)", false}},
			served: []string{"resize", "thumbnail"},
		},
		{
			name: "duplicate tokens refuse both users",
			files: map[string]string{
				usersDir + "box.json":   `{"name": "box", "token": "` + aliceToken + `"}`,
				usersDir + "carol.json": `{"name": "carol", "token": "` + otherToken + `"}`,
			},
			want: []wantProblem{
				{usersDir + "alice.json", "/token", "the same token is used by box; all of them are refused", false},
				{usersDir + "box.json", "/token", "the same token is used by alice; all of them are refused", false},
			},
			served: []string{"resize", "thumbnail"},
		},
		{
			name: "ignored names are warnings",
			files: map[string]string{
				"Task.Example.com/taskhoster-queues/x.json": minimalItem,
				"..hidden/taskhoster-queues/x.json":         minimalItem,
				"README.md":                                 "hello",
				queuesDir + "Resize.json":                   minimalItem,
				queuesDir + "notes.txt":                     "",
				queuesDir + "resize.json~":                  "",
				queuesDir + "folder.json":                   "<dir>",
				host + "/taskhoster-queue/typo.json":        minimalItem,
			},
			want: []wantProblem{
				{"..hidden", "", "ignored: a host folder is named as a lower-case DNS name", true},
				{"README.md", "", "ignored: only host folders belong here", true},
				{"Task.Example.com", "", "ignored: a host folder is named", true},
				{host + "/taskhoster-queue", "", "ignored: a host folder holds only the folders", true},
				{queuesDir + "Resize.json", "", "ignored: a queue file is named NAME.json", true},
				{queuesDir + "folder.json", "", "ignored: not a regular file", true},
				{queuesDir + "notes.txt", "", "ignored: a queue file is named", true},
				{queuesDir + "resize.json~", "", "ignored: a queue file is named", true},
			},
			served: []string{"resize", "thumbnail"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := goodTree()
			delete(files, "other.example.org/taskhoster-users/.keep.example")
			maps.Copy(files, tt.files)
			dir, snap, problems := mustLoad(t, files)

			if len(problems) != len(tt.want) {
				t.Errorf("got %d problems, want %d:\n%s", len(problems), len(tt.want), list(problems))
			}
			for i, w := range tt.want {
				if i >= len(problems) {
					break
				}
				p := problems[i]
				wantFile := filepath.Join(dir, filepath.FromSlash(w.file))
				if p.File != wantFile || p.JSONPath != w.jsonPath || p.Warning != w.warning || !strings.Contains(p.Reason, w.reason) {
					t.Errorf("problem %d = %+v\nwant file %s, path %q, warning %v, reason containing %q",
						i, p, wantFile, w.jsonPath, w.warning, w.reason)
				}
			}
			wantErrors := slices.ContainsFunc(tt.want, func(w wantProblem) bool { return !w.warning })
			if got := folderconfig.HasErrors(problems); got != wantErrors {
				t.Errorf("HasErrors = %v, want %v", got, wantErrors)
			}

			// The other host never suffers.
			if _, ok := snap.Host("other.example.org"); !ok {
				t.Errorf("other.example.org is not served")
			}
			h, ok := snap.Host(host)
			if !ok {
				t.Fatalf("host %s is not served", host)
			}
			if diff := cmp.Diff(tt.served, slices.Sorted(maps.Keys(h.Queues))); diff != "" {
				t.Errorf("served queues of %s (-want +got):\n%s", host, diff)
			}
		})
	}
}

func list(problems []folderconfig.Problem) string {
	var b strings.Builder
	for _, p := range problems {
		b.WriteString("  " + p.String() + "\n")
	}
	return b.String()
}

func TestRefusedUsersCannotAuthenticate(t *testing.T) {
	files := goodTree()
	files[usersDir+"box.json"] = `{"name": "box", "token": "` + aliceToken + `"}`
	files[usersDir+"carol.json"] = `{"name": "caroline", "token": "` + otherToken + `"}`
	_, snap, _ := mustLoad(t, files)
	h, _ := snap.Host(host)

	for _, tok := range []string{aliceToken, otherToken} {
		if user, ok := h.Authenticate(tok); ok {
			t.Errorf("a refused token authenticates as %q", user)
		}
	}
	want := map[string]domain.User{"alice": {Name: "alice"}, "box": {Name: "box"}, "carol": {Name: "carol"}}
	if diff := cmp.Diff(want, h.Users); diff != "" {
		t.Errorf("users (-want +got):\n%s", diff)
	}
}

func TestProblemString(t *testing.T) {
	tests := []struct {
		name string
		p    folderconfig.Problem
		want string
	}{
		{"with a path", folderconfig.Problem{File: "h/q.json", JSONPath: "/access/work/1", Reason: "bad"}, "h/q.json: /access/work/1: bad"},
		{"whole file", folderconfig.Problem{File: "h/q.json", Reason: "bad"}, "h/q.json: bad"},
		{"warning", folderconfig.Problem{File: "x", Reason: "ignored", Warning: true}, "x: ignored"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, goodTree())
	if problems := folderconfig.Check(dir); folderconfig.HasErrors(problems) {
		t.Errorf("Check(good folder) has errors:\n%s", list(problems))
	}
	writeTree(t, dir, map[string]string{resizeFile: `{"item": {}, "settings": {"leaseSeconds": 0}}`})
	if problems := folderconfig.Check(dir); !folderconfig.HasErrors(problems) {
		t.Errorf("Check(bad folder) has no errors")
	}
	if problems := folderconfig.Check(filepath.Join(dir, "missing")); !folderconfig.HasErrors(problems) {
		t.Errorf("Check(missing folder) has no errors")
	}
}
