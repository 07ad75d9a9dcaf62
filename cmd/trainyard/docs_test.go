package main

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"trainyard/internal/cli"
)

var updateDocs = flag.Bool("update", false, "rewrite docs/cli/ instead of comparing with it")

// TestCLIDocsUpToDate regenerates the CLI reference from the real command
// tree and compares it with the checked-in docs/cli/.
func TestCLIDocsUpToDate(t *testing.T) {
	const fix = "regenerate it with: go run ./cmd/trainyard docs docs/cli (or: go test ./cmd/trainyard -run TestCLIDocsUpToDate -update)"
	checkedIn := filepath.Join("..", "..", "docs", "cli")
	if *updateDocs {
		if err := cli.GenDocs(rootCommand(), checkedIn); err != nil {
			t.Fatal(err)
		}
	}
	fresh := t.TempDir()
	if err := cli.GenDocs(rootCommand(), fresh); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadDir(fresh)
	if err != nil || len(want) == 0 {
		t.Fatalf("GenDocs wrote no pages: %v", err)
	}
	for _, e := range want {
		gen, _ := os.ReadFile(filepath.Join(fresh, e.Name()))
		old, err := os.ReadFile(filepath.Join(checkedIn, e.Name()))
		if err != nil {
			t.Errorf("docs/cli/%s is missing; %s", e.Name(), fix)
			continue
		}
		if string(gen) != string(old) {
			t.Errorf("docs/cli/%s is out of date; %s", e.Name(), fix)
		}
	}
	have, _ := filepath.Glob(filepath.Join(checkedIn, "trainyard*.md"))
	if len(have) != len(want) {
		t.Errorf("docs/cli holds %d pages, the CLI has %d; %s", len(have), len(want), fix)
	}
	if _, err := os.Stat(filepath.Join(fresh, "trainyard_server.md")); err != nil {
		t.Errorf("the reference lacks the server command: %v", err)
	}
}
