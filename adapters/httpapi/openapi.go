package httpapi

import (
	_ "embed"
	"net/http"

	"github.com/go-chi/chi/v5"
)

// document is the OpenAPI 3.1 description of this API (openapi.json, next
// to this file), written by hand. tests/e2e/openapi_test.go holds it to the
// router (every route and no other) and to the replies of the running
// server; openapi_test.go here checks its shape and its $refs.
//
//go:embed openapi.json
var document []byte

// DocumentPath is where every host serves the document. It starts with "_",
// which no queue name can (SPEC §1), so it never shadows a queue; like
// /_health it answers whatever the Host header says, since it is the same
// for every host.
const DocumentPath = "/_openapi.json"

// Document is the OpenAPI document, as served.
func Document() []byte { return document }

func serveDocument(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(document)
}

// Routes is the router, for walking its routes (chi.Walk): the test that
// holds the document to the router does.
func (a *API) Routes() chi.Routes { return a.router }
