package api

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite openapi.json and docs/openapi.json from the route table and apitypes")

// openAPIFiles are the generated document's copies: the embedded one the
// server serves, and the one in docs/ for readers and tools.
var openAPIFiles = []string{"openapi.json", filepath.Join("..", "..", "docs", "openapi.json")}

// The checked-in documents are exactly what the generator makes now.
func TestOpenAPIDocument(t *testing.T) {
	docs, _ := apitypesDocs(t)
	want := generateOpenAPI(t, docs)
	for _, f := range openAPIFiles {
		if *update {
			if err := os.WriteFile(f, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is out of date with the routes or apitypes; run go test ./internal/api -run TestOpenAPIDocument -update", f)
		}
	}
	if !bytes.Equal(openAPIDoc, want) && !*update {
		t.Errorf("the embedded document differs from the generated one")
	}
}

type openAPIOp struct {
	Security   *[]map[string][]string `json:"security"`
	Parameters []struct {
		Name, In string
	} `json:"parameters"`
}

func loadOpenAPI(t *testing.T) (doc struct {
	OpenAPI    string                          `json:"openapi"`
	Paths      map[string]map[string]openAPIOp `json:"paths"`
	Components struct {
		Schemas map[string]struct {
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"schemas"`
	} `json:"components"`
}) {
	t.Helper()
	if err := json.Unmarshal(openAPIDoc, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// Every route registered on the mux is in the document with its method,
// path parameters and security (a bearer token unless it is registered
// without h.auth), and the document has no route the mux lacks.
func TestOpenAPICoversEveryRoute(t *testing.T) {
	doc := loadOpenAPI(t)
	if doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi = %q, want 3.1.0", doc.OpenAPI)
	}
	files, _ := filepath.Glob("*.go")
	re := regexp.MustCompile(`mux\.Handle(Func)?\("([A-Z]+) (/[^"]*)", *(h\.auth\()?`)
	registered := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			method, pattern, authed := m[2], m[3], m[4] != ""
			registered[method+" "+pattern] = true
			path, params := openAPIPath(pattern)
			op, ok := doc.Paths[path][strings.ToLower(method)]
			if !ok {
				t.Errorf("%s: route %s %s is not in the OpenAPI document; add it to apiRoutes and run -update", f, method, pattern)
				continue
			}
			var inPath []string
			for _, p := range op.Parameters {
				if p.In == "path" {
					inPath = append(inPath, p.Name)
				}
			}
			if !slices.Equal(inPath, params) {
				t.Errorf("%s %s: path parameters %v, want %v", method, pattern, inPath, params)
			}
			public := op.Security != nil && len(*op.Security) == 0
			if public == authed {
				t.Errorf("%s %s: the document says public=%v, but the route is registered with h.auth=%v", method, pattern, public, authed)
			}
		}
	}
	if len(registered) < 60 {
		t.Fatalf("found only %d routes; the pattern no longer matches how routes are registered", len(registered))
	}
	for r := range apiRoutes {
		if !registered[r] {
			t.Errorf("apiRoutes documents %q, which no file registers; remove it", r)
		}
	}
	n := 0
	for _, ops := range doc.Paths {
		n += len(ops)
	}
	if n != len(registered) {
		t.Errorf("the document has %d operations for %d registered routes", n, len(registered))
	}
}

// Every apitypes struct has a schema whose properties are exactly its
// JSON field names, read from the source independently of the generator.
func TestOpenAPISchemasMatchStructs(t *testing.T) {
	doc := loadOpenAPI(t)
	_, structs := apitypesDocs(t)
	if len(structs) < 50 {
		t.Fatalf("found only %d apitypes structs", len(structs))
	}
	for name, fields := range structs {
		s, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("apitypes.%s has no schema: no documented route uses it", name)
			continue
		}
		var props []string
		for p := range s.Properties {
			props = append(props, p)
		}
		sort.Strings(props)
		sort.Strings(fields)
		if !slices.Equal(props, fields) {
			t.Errorf("schema %s has properties %v, the struct's JSON fields are %v", name, props, fields)
		}
	}
	for name := range doc.Components.Schemas {
		if _, ok := structs[name]; !ok {
			t.Errorf("schema %s has no apitypes struct", name)
		}
	}
}

// The document is served without a token.
func TestOpenAPIServed(t *testing.T) {
	srv := httptest.NewServer(Handler(Config{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/api/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /api/v1/openapi.json: %d %s\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if !bytes.Equal(body, openAPIDoc) {
		t.Errorf("served document differs from the embedded one")
	}
}
