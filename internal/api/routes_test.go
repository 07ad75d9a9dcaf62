package api

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"trainyard/internal/authz"
)

// Every authenticated route declares its authorization action, and every
// declared action exists: a new route cannot slip in unclassified.
func TestEveryRouteDeclaresItsAction(t *testing.T) {
	files, _ := filepath.Glob("*.go")
	re := regexp.MustCompile(`mux\.Handle\("([A-Z]+ /api/v1/[^"]*)", h\.auth\(`)
	known := map[string]bool{"": true}
	for _, a := range authz.Actions() {
		known[string(a)] = true
	}
	found := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			found++
			action, ok := routeActions[m[1]]
			if !ok {
				t.Errorf("%s: route %q has no entry in routeActions", f, m[1])
			} else if !known[action] {
				t.Errorf("route %q declares unknown action %q", m[1], action)
			}
		}
	}
	if found < 20 {
		t.Fatalf("found only %d routes; the pattern no longer matches how routes are registered", found)
	}
	if len(routeActions) != found {
		t.Errorf("routeActions has %d entries for %d registered routes; remove stale ones", len(routeActions), found)
	}
}
