package api

import (
	_ "embed"
	"net/http"
)

// openAPIDoc is the OpenAPI 3.1 document of this API. It is generated from
// the route table and the apitypes structs by the package's tests
// (go test ./internal/api -run TestOpenAPIDocument -update), which also fail
// when it, or its copy docs/openapi.json, no longer matches them.
//
//go:embed openapi.json
var openAPIDoc []byte

// openAPI serves GET /api/v1/openapi.json without a token: the document
// describes the API's shape, the same for every deployment and published in
// the repository; it names no pool, project, user or job. Tools (client
// generators, API browsers) fetch it before they hold a token.
func openAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	w.Write(openAPIDoc)
}
