package node

import (
	_ "embed"
	"net/http"
)

// OpenAPI is the OpenAPI 3.1 document of the node's HTTP API, served at
// GET /v1/openapi.json (no token needed). A test holds it to the
// handlers: every route, status and JSON field.
//
//go:embed openapi.json
var OpenAPI []byte

func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write(OpenAPI)
}
