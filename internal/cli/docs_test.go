package cli

import (
	"os"
	"path/filepath"
	"testing"
)

func TestGenDocsRemovesStalePagesOnly(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "trainyard_gone.md")
	other := filepath.Join(dir, "README.md")
	for _, p := range []string{stale, other} {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := GenDocs(newRoot(BuildInfo{}, defaultEnv()), dir); err != nil {
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
