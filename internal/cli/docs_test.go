package cli

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var updateDocs = flag.Bool("update", false, "rewrite docs/cli/ instead of comparing with it")

// TestCLIDocsUpToDate regenerates the CLI reference and compares it with the
// checked-in docs/cli/.
func TestCLIDocsUpToDate(t *testing.T) {
	const fix = "regenerate it with: go run ./cmd/trainyard docs docs/cli (or: go test ./internal/cli -run TestCLIDocsUpToDate -update)"
	checkedIn := filepath.Join("..", "..", "docs", "cli")
	if *updateDocs {
		if err := GenDocs(checkedIn); err != nil {
			t.Fatal(err)
		}
	}
	fresh := t.TempDir()
	if err := GenDocs(fresh); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadDir(fresh)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) == 0 {
		t.Fatal("GenDocs wrote no pages")
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
}

func TestGenDocsRemovesStalePagesOnly(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "trainyard_gone.md")
	other := filepath.Join(dir, "README.md")
	for _, p := range []string{stale, other} {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := GenDocs(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale page %s was kept", stale)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("unrelated file was removed: %v", err)
	}
	for _, page := range []string{"trainyard.md", "trainyard_submit.md", "trainyard_spec_validate.md", "trainyard_completion_bash.md"} {
		if _, err := os.Stat(filepath.Join(dir, page)); err != nil {
			t.Errorf("page %s not written: %v", page, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "trainyard_docs.md")); err == nil {
		t.Error("the hidden docs command got a page")
	}
}
