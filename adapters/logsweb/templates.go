package logsweb

import (
	"html/template"
	"strconv"
	"time"
)

// parsePages parses the page templates. They are constants of this
// package, so a failure is a bug that every test run would show.
func parsePages() *template.Template {
	funcs := template.FuncMap{
		"taskURL": taskURL,
		"when":    func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000") },
		"iso":     func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
		"size":    size,
	}
	return template.Must(template.New("pages").Funcs(funcs).Parse(pagesHTML))
}

// size shows a byte count; 0 (no such payload yet) as a dash.
func size(n int64) string {
	if n == 0 {
		return "–"
	}
	return strconv.FormatInt(n, 10)
}

// pagesHTML holds every page. "head" and "foot" frame them; the style is
// inline because the pages load nothing else.
const pagesHTML = `
{{define "head"}}<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.}} · Task Logs</title>
<script src="/live.js" defer></script>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5rem; color: #222; }
h1 { font-size: 1.4rem; margin: 0 0 1rem; } h1 a { color: inherit; text-decoration: none; }
h2 { font-size: 1.1rem; margin: 1.5rem 0 .5rem; }
form.filter { display: flex; flex-wrap: wrap; gap: .5rem 1rem; align-items: end; margin-bottom: 1rem; }
form.filter label { display: flex; flex-direction: column; font-size: .8rem; color: #555; }
form.filter input, form.filter select { font: inherit; padding: .2rem .3rem; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: .25rem .5rem; border-bottom: 1px solid #ddd; white-space: nowrap; }
th { background: #f4f4f4; font-weight: 600; } td.num, th.num { text-align: right; }
code, .mono { font-family: ui-monospace, monospace; }
.error { background: #fde8e8; border: 1px solid #e0a0a0; padding: .5rem .75rem; }
nav.pages { margin: 1rem 0; display: flex; gap: 1rem; }
.muted { color: #777; }
tr.failure td { background: #fdecea; } td.failure { color: #a40000; border-left: 4px solid #c62828; }
tr.giveback td { background: #fff6e0; } td.giveback { color: #7a4b00; border-left: 4px solid #e0a000; }
tr.retried td { background: #e8f0fe; } td.retried { color: #1a4d99; border-left: 4px solid #3367d6; }
.code { font-family: ui-monospace, monospace; }
.badge { display: inline-block; font-size: .75rem; font-weight: 700; letter-spacing: .04em; padding: 0 .35rem;
  border-radius: 3px; color: #fff; background: #c62828; margin-right: .35rem; }
p.count { margin: .25rem 0 .75rem; } #live { font-size: .8rem; }
p.news { background: #e8f0fe; border: 1px solid #9ab4ea; padding: .4rem .75rem; }
dl.timing { display: grid; grid-template-columns: max-content auto; gap: .15rem 1rem; margin: .5rem 0 1rem; }
dl.timing dt { color: #555; } dl.timing dd { margin: 0; }
</style>
</head>
<body>
<h1><a href="/">Task Logs</a></h1>
{{end}}

{{define "foot"}}<p class="muted">Times are UTC. This page reads only the local mirror; pull more with <code>taskhoster logs pull</code>.</p>
</body>
</html>
{{end}}

{{/* A task failing (failed, timeout, cancelled), given back (released) or
retried stands out by a word as well as a colour: a FAILED badge and
"✗ failed" with its error code, "✗ cancelled", "↺ released", "↻ retried". */}}
{{define "rowclass"}}event{{if .Failure}} failure{{else if .GaveBack}} giveback{{else if .Retried}} retried{{end}}{{end}}
{{define "event"}}{{if .Failure}}<td class="failure"><span class="badge" title="the task failed for good">FAILED</span><b>✗ {{.Event}}</b>{{if and .Error (ne .Error (print .Event))}} <span class="code" title="error code">error: {{.Error}}</span>{{end}}</td>
{{- else if .GaveBack}}<td class="giveback"><b>↺ {{.Event}}</b> <span title="given back by its worker">given back</span></td>
{{- else if .Retried}}<td class="retried"><b>↻ {{.Event}}</b> <span title="a failed task put back to pending">back to pending</span></td>
{{- else}}<td>{{.Event}}</td>{{end}}{{end}}

{{define "sizes"}}<td class="num">{{size .Item}}</td><td class="num">{{size .Progress}}</td><td class="num">{{size .Result}}</td><td class="num">{{size .Error}}</td>{{end}}

{{define "list"}}{{template "head" "Events"}}
<div id="live-root" data-latest="{{.Latest}}" data-follow="{{if .Follow}}yes{{else}}no{{end}}"></div>
<form class="filter" method="get" action="/">
  <label>host <input name="host" id="host" value="{{.Form.Host}}" size="18" list="hosts" placeholder="name, or prefix*"></label>
  <label>queue <input name="queue" id="queue" value="{{.Form.Queue}}" size="12" list="queues" placeholder="name, or prefix*"></label>
  <label>task id <input name="id" id="id" value="{{.Form.ID}}" size="17" class="mono" placeholder="id, or first digits*"></label>
  <label>event <select name="event" id="event">
    <option value="">any</option>
    {{- $ev := .Form.Event}}{{range .Events}}
    <option{{if eq (print .) $ev}} selected{{end}}>{{.}}</option>{{end}}
  </select></label>
  <label>error <select name="error" id="error-code">
    <option value="">any</option>
    {{- $code := .Form.Error}}{{range .Errors}}
    <option{{if eq . $code}} selected{{end}}>{{.}}</option>{{end}}
  </select></label>
  <label>worker <input name="worker" id="worker" value="{{.Form.Worker}}" size="12" placeholder="name, or prefix*"></label>
  <label>from (UTC) <input type="datetime-local" step="1" name="from" id="from" value="{{.Form.From}}"></label>
  <label>to (UTC, before) <input type="datetime-local" step="1" name="to" id="to" value="{{.Form.To}}"></label>
  <button type="submit" id="apply">Filter</button>
  <a href="/">Clear</a>
</form>
<datalist id="hosts">{{range .Hosts}}<option value="{{.}}">{{end}}</datalist>
<datalist id="queues">{{range .Queues}}<option value="{{.}}">{{end}}</datalist>
{{if .Error}}<p class="error" id="error">{{.Error}}</p>{{end}}
{{if not .Error}}<p class="count" id="count" data-swap>{{if .More}}More than {{.Count}} events match{{else if eq .Count 1}}1 event matches{{else}}{{.Count}} events match{{end}}{{if .Form.Filter}} the filter{{end}}.
<span class="muted" id="live"></span></p>{{end}}
<p class="news" id="news" hidden>Newer events came in: <a href="{{.NewestURL}}">« see the newest</a>.</p>
<table id="events" data-swap>
<thead><tr><th>time</th><th>host</th><th>queue</th><th>task</th><th>event</th><th>status</th>
<th class="num">attempts</th><th>worker</th>
<th class="num">item</th><th class="num">progress</th><th class="num">result</th><th class="num">error</th></tr></thead>
<tbody>
{{range .Lines}}<tr class="{{template "rowclass" .}}">
<td><time datetime="{{iso .At}}">{{when .At}}</time></td><td>{{.Host}}</td><td>{{.Queue}}</td>
<td><a class="task mono" href="{{taskURL .Host .Queue .ID}}">{{.ID}}</a></td>
{{template "event" .}}<td>{{.Status}}</td><td class="num">{{.Attempts}}</td><td>{{.Worker}}</td>
{{template "sizes" .Bytes}}
</tr>
{{else}}<tr><td colspan="12" class="muted">{{if not .Error}}No events match.{{end}}</td></tr>
{{end}}</tbody>
</table>
<p class="muted">Sizes are the payloads' bytes as each event reports them; error is the reason a worker gave, or else the error code.
FAILED and ✗ mark a task failing, with its error code; ↺ a task its worker gave back.
Host, queue, task id and worker match exactly, or by prefix when they end in *.</p>
<nav class="pages" id="pages" data-swap>
{{if .Newest}}<a href="{{.Newest}}" id="newest">« newest</a>{{end}}
{{if .Newer}}<a href="{{.Newer}}" id="newer">‹ newer</a>{{end}}
{{if .Older}}<a href="{{.Older}}" id="older">older ›</a>{{end}}
</nav>
{{template "foot"}}{{end}}

{{define "task"}}{{template "head" (print "Task " .ID)}}
<div id="live-root" data-latest="{{.Latest}}" data-follow="yes"></div>
<p>Task <code id="task-id">{{.ID}}</code> of queue <b>{{.Queue}}</b> on <b>{{.Host}}</b>.
<a href="{{.ListURL}}">Its events in the list</a>. <span class="muted" id="live"></span></p>
{{with .Timing}}<dl class="timing" id="timing" data-swap>
<dt>waited</dt><dd id="waited">{{if .Waited}}{{.Waited}} <span class="muted">posted → first claim</span>{{else}}<span class="muted">not claimed (as far as the mirror knows)</span>{{end}}</dd>
<dt>ran</dt><dd id="ran">{{if .Ran}}{{.Ran}} <span class="muted">{{if gt .Claims 1}}last of {{.Claims}} claims{{else}}claim{{end}} → end</span>{{else if .Ended}}<span class="muted">ended without a claim</span>{{else}}<span class="muted">not ended (as far as the mirror knows)</span>{{end}}</dd>
{{if .Total}}<dt>in all</dt><dd id="total">{{.Total}} <span class="muted">posted → end</span></dd>{{end}}
</dl>{{end}}
<h2>Trail</h2>
<table id="trail" data-swap>
<thead><tr><th>time</th><th>event</th><th>status</th><th class="num">attempts</th><th>worker</th>
<th class="num">item</th><th class="num">progress</th><th class="num">result</th><th class="num">error</th>
<th>archived</th></tr></thead>
<tbody>
{{$page := .}}{{range .Lines}}<tr class="{{template "rowclass" .}}">
<td><time datetime="{{iso .At}}">{{when .At}}</time></td>{{template "event" .}}<td>{{.Status}}</td>
<td class="num">{{.Attempts}}</td><td>{{.Worker}}</td>
{{template "sizes" .Bytes}}
<td>{{range .Archived}}{{$url := $page.PayloadURL .}}{{if $url}}<a class="payload" href="{{$url}}" target="_blank" rel="noopener">{{.}}</a> {{else}}<span class="muted" title="not in the mirror">{{.}}</span> {{end}}{{end}}</td>
</tr>
{{end}}</tbody>
</table>
<p class="muted">Sizes are bytes as each event reported them; archived bodies open in a new tab.</p>
<div id="archive" data-swap>{{if .Payloads}}<h2>Archived payloads</h2>
<ul id="payloads">
{{range .Payloads}}<li>{{if .Stored}}<a class="payload" href="{{$page.FileURL .File}}" target="_blank" rel="noopener">{{.File}}</a> <span class="muted">{{.Size}} bytes</span>{{else}}{{.File}} <span class="muted">(not in the mirror: not fetched yet, or aged out on the server first)</span>{{end}}</li>
{{end}}</ul>{{end}}</div>
{{template "foot"}}{{end}}

{{define "message"}}{{template "head" .Title}}
<p class="error">{{.Text}}</p>
<p><a href="/">Back to the events</a></p>
{{template "foot"}}{{end}}
`
