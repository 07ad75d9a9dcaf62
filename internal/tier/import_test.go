package tier_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/local"
	"trainyard/internal/tier"
)

// newDst returns another job's empty output tree.
func newDst(t *testing.T) (string, executor.Outputs) {
	t.Helper()
	root := t.TempDir()
	out := filepath.Join(root, "out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	o, err := local.NewReader(filepath.Join(root, "runs")).Outputs(context.Background(), out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	return out, o
}

// A directory and a file checkpoint of one job are copied into another's
// checkpoint directory with their digests, complete, without the link the
// job left among its files; copying again keeps the copy.
func TestImportCopiesACheckpoint(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	out, dst := newDst(t)
	for name, c := range r.recs {
		if err := tier.Import(ctx, r.o, dst, c); err != nil {
			t.Fatalf("import %s: %v", name, err)
		}
		got, err := dst.Digest(ctx, name)
		if err != nil || got.SHA256 != c.SHA256 {
			t.Fatalf("imported %s: %+v, %v; want complete with sha256 %s", name, got, err, c.SHA256)
		}
		if err := tier.Import(ctx, r.o, dst, c); err != nil {
			t.Errorf("import %s again: %v; want the copy kept", name, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(out, "checkpoints", "step-1", "opt", "state")); string(b) != "adam" {
		t.Errorf("imported file holds %q", b)
	}
	if _, err := os.Lstat(filepath.Join(out, "checkpoints", "step-1", "leak")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the link was copied: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(out, "checkpoints", ".restore-step-1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the staging directory is left: %v", err)
	}
	// The source is untouched.
	if got, err := r.o.Digest(ctx, "step-1"); err != nil || got.SHA256 != r.recs["step-1"].SHA256 {
		t.Errorf("the source changed: %+v, %v", got, err)
	}
}

// A source changed since it was registered is refused and leaves nothing
// in the destination; something already at the name is never replaced.
func TestImportRefusesAChangedSourceAndWhatIsInItsPlace(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	out, dst := newDst(t)
	write(t, filepath.Join(r.out, "checkpoints", "step-1", "model.bin"), "weights-2")
	err := tier.Import(ctx, r.o, dst, r.recs["step-1"])
	if !errors.Is(err, tier.ErrMismatch) {
		t.Fatalf("import of a changed source: %v; want ErrMismatch", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(out, "checkpoints")); len(ents) != 0 {
		t.Errorf("a refused import left %d entries", len(ents))
	}

	write(t, filepath.Join(out, "checkpoints", "last.pt"), "the job's own")
	if err := tier.Import(ctx, r.o, dst, r.recs["last.pt"]); err == nil {
		t.Fatal("import over the job's own file succeeded")
	}
	if b, _ := os.ReadFile(filepath.Join(out, "checkpoints", "last.pt")); string(b) != "the job's own" {
		t.Errorf("the job's file was replaced: %q", b)
	}
	if _, err := os.Lstat(filepath.Join(out, "checkpoints", "last.pt"+domain.CheckpointMarker)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a marker was added to the job's own file: %v", err)
	}
}
