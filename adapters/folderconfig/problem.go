package folderconfig

import (
	"strings"

	"go.uber.org/zap"
)

// Problem is one thing wrong in the hosts folder.
type Problem struct {
	// File is the path of the file or folder, the folder given to Load
	// joined with the path under it.
	File string
	// JSONPath is a JSON pointer into the file ("/access/work/1"), or ""
	// when the problem is the whole file.
	JSONPath string
	Reason   string
	// Warning marks a name that is ignored; it does not make `check` fail.
	Warning bool
}

// String is "FILE: JSONPATH: REASON", with the path left out when the
// problem is the whole file. It does not say whether p is a warning: the
// caller (`check`) prints that as it likes, from Warning.
func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	b.WriteString(": ")
	if p.JSONPath != "" {
		b.WriteString(p.JSONPath)
		b.WriteString(": ")
	}
	b.WriteString(p.Reason)
	return b.String()
}

// HasErrors reports whether any of problems is an error, not a warning:
// what makes `taskhoster check` exit non-zero.
func HasErrors(problems []Problem) bool {
	for _, p := range problems {
		if !p.Warning {
			return true
		}
	}
	return false
}

func (p Problem) log(log *zap.Logger) {
	fields := []zap.Field{zap.String("file", p.File), zap.String("jsonPath", p.JSONPath), zap.String("reason", p.Reason)}
	if p.Warning {
		log.Warn("hosts folder: ignored", fields...)
	} else {
		log.Error("hosts folder: not served", fields...)
	}
}

// fileReport collects the problems of one file and remembers whether any of
// them was an error, which is what decides that the file is not used.
type fileReport struct {
	file     string
	problems *[]Problem
	failed   bool
}

func (r *fileReport) fail(jsonPath, reason string) {
	r.failed = true
	*r.problems = append(*r.problems, Problem{File: r.file, JSONPath: jsonPath, Reason: reason})
}
