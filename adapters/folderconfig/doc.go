// Package folderconfig reads the hosts folder of SPEC §1 and keeps it live.
//
//	<hosts>/<host>/taskhoster-queues/<queue>.json
//	<hosts>/<host>/taskhoster-users/<user>.json
//
// Load reads the folder once into an immutable Snapshot and lists every
// Problem it found; Check is the same for `taskhoster check`. Live serves the
// newest Snapshot and re-reads the whole folder when fsnotify reports a
// change (and, as a safety net, when a cheap periodic scan of names, sizes
// and modification times differs from the last load).
//
// What is served, and what is only reported:
//
//   - A problem is an error or a warning. Warnings are names that are
//     ignored: a host folder that is not a lower-case DNS name, a file whose
//     name is not `<name>.json` with a valid queue or user name, anything
//     else lying in these folders. Errors are files that are there to be used
//     but cannot be.
//   - A queue file with any error is not served. It never takes other queues
//     or other hosts down with it.
//   - A host folder with a valid name is served even when it has no queues
//     (GET / then lists none) or when some of its files are broken.
//   - A user file with an error (bad JSON, a name that differs from the file
//     name, a malformed token, a token shared with another user of the host)
//     is refused, but its file name still defines the user NAME: queues that
//     list it keep being served, and nobody can authenticate as it, because
//     its domain.User has an empty Token. Only a name with no user file at all
//     is "undefined" and makes a queue file that lists it invalid. This keeps
//     one bad user file (or a token pasted twice) from silently taking every
//     queue that mentions the user offline, while still locking that user out.
//   - A token never appears in a Problem, an error or a log line; even the
//     JSON syntax errors of user files leave out the offending character.
//
// Settings are bounded so that no arithmetic on them can overflow: every
// duration is at most ten years of seconds, maxItemBytes at most 64 MiB.
package folderconfig
