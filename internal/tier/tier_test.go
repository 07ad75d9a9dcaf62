package tier_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"trainyard/internal/blob"
	blobfs "trainyard/internal/blob/fs"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/local"
	"trainyard/internal/tier"
)

func write(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// rig is a job's output tree with a directory checkpoint and a file
// checkpoint, both registered with their digests, and a blob store.
type rig struct {
	out  string
	o    executor.Outputs
	bs   blob.Store
	recs map[string]domain.CheckpointRecord
}

func newRig(t *testing.T) *rig {
	t.Helper()
	root := t.TempDir()
	out := filepath.Join(root, "out")
	ck := filepath.Join(out, "checkpoints")
	write(t, filepath.Join(ck, "step-1", "model.bin"), "weights-1")
	write(t, filepath.Join(ck, "step-1", "opt", "state"), "adam")
	write(t, filepath.Join(ck, "step-1", domain.CheckpointMarker), "")
	write(t, filepath.Join(ck, "last.pt"), "file checkpoint")
	write(t, filepath.Join(ck, "last.pt"+domain.CheckpointMarker), "")
	if err := os.Symlink("/etc/passwd", filepath.Join(ck, "step-1", "leak")); err != nil {
		t.Fatal(err)
	}
	o, err := local.NewReader(filepath.Join(root, "runs")).Outputs(context.Background(), out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	bs, err := blobfs.New(filepath.Join(root, "bucket"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bs.Close() })
	r := &rig{out: out, o: o, bs: bs, recs: map[string]domain.CheckpointRecord{}}
	for _, name := range []string{"step-1", "last.pt"} {
		d, err := o.Digest(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		r.recs[name] = d.Record(7, 1)
	}
	return r
}

// A copy is verified, restored byte for byte after the local copy is
// gone, and a file checkpoint gets its marker back.
func TestCopyThenRestore(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	for name, c := range r.recs {
		if err := tier.Copy(ctx, r.bs, r.o, c); err != nil {
			t.Fatalf("copy %s: %v", name, err)
		}
		if _, _, err := r.bs.Get(ctx, tier.Key(7, "step-1", "leak")); !errors.Is(err, blob.ErrNotFound) {
			t.Fatalf("the link was copied: %v", err)
		}
		if err := r.o.Remove(ctx, "checkpoints/"+name); err != nil {
			t.Fatal(err)
		}
		r.o.Remove(ctx, "checkpoints/"+name+domain.CheckpointMarker)
		if err := tier.Restore(ctx, r.bs, r.o, c); err != nil {
			t.Fatalf("restore %s: %v", name, err)
		}
		got, err := r.o.Digest(ctx, name)
		if err != nil || got.SHA256 != c.SHA256 {
			t.Fatalf("restored %s: %+v, %v; want sha256 %s", name, got, err, c.SHA256)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(r.out, "checkpoints", "step-1", "opt", "state")); string(b) != "adam" {
		t.Fatalf("restored file holds %q", b)
	}
	if _, err := os.Lstat(filepath.Join(r.out, "checkpoints", ".restore-step-1")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the staging directory is left: %v", err)
	}
}

// The bucket's bytes are untrusted: a copy changed there, grown there, or
// holding a key that climbs out is refused and leaves nothing behind, and
// a link the job planted at the staging path is not followed.
func TestRestoreRefusesABadCopy(t *testing.T) {
	ctx := context.Background()
	for name, tamper := range map[string]func(r *rig){
		"changed bytes": func(r *rig) {
			r.bs.Put(ctx, tier.Key(7, "step-1", "model.bin"), bytes.NewReader([]byte("weights-X")), 9)
		},
		"extra file": func(r *rig) {
			r.bs.Put(ctx, tier.Key(7, "step-1", "more"), bytes.NewReader([]byte("x")), 1)
		},
		"missing file": func(r *rig) { r.bs.Delete(ctx, tier.Key(7, "step-1", "opt/state")) },
	} {
		t.Run(name, func(t *testing.T) {
			r := newRig(t)
			c := r.recs["step-1"]
			if err := tier.Copy(ctx, r.bs, r.o, c); err != nil {
				t.Fatal(err)
			}
			tamper(r)
			if err := tier.Verify(ctx, r.bs, c); !errors.Is(err, tier.ErrMismatch) {
				t.Fatalf("verify a tampered copy: %v, want ErrMismatch", err)
			}
			r.o.Remove(ctx, "checkpoints/step-1")
			outside := t.TempDir()
			if err := os.Symlink(outside, filepath.Join(r.out, "checkpoints", ".restore-step-1")); err != nil {
				t.Fatal(err)
			}
			if err := tier.Restore(ctx, r.bs, r.o, c); !errors.Is(err, tier.ErrMismatch) {
				t.Fatalf("restore a tampered copy: %v, want ErrMismatch", err)
			}
			for _, p := range []string{"checkpoints/step-1", "checkpoints/.restore-step-1"} {
				if _, err := os.Lstat(filepath.Join(r.out, p)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s is left after a refused restore: %v", p, err)
				}
			}
			if ents, _ := os.ReadDir(outside); len(ents) != 0 {
				t.Fatalf("restore wrote through the planted link: %v", ents)
			}
		})
	}
}

// Delete removes every object of the checkpoint and no other's.
func TestDelete(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	for _, c := range r.recs {
		if err := tier.Copy(ctx, r.bs, r.o, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := tier.Delete(ctx, r.bs, 7, "step-1"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tier.List(ctx, r.bs, r.recs["step-1"]); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("after delete: %v, want ErrNotFound", err)
	}
	if err := tier.Verify(ctx, r.bs, r.recs["last.pt"]); err != nil {
		t.Fatalf("the other checkpoint's copy: %v", err)
	}
}

// A link the job put at the checkpoint's own name is not replaced or
// followed: the restore is refused.
func TestRestoreRefusesWhatIsInItsPlace(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	c := r.recs["step-1"]
	if err := tier.Copy(ctx, r.bs, r.o, c); err != nil {
		t.Fatal(err)
	}
	r.o.Remove(ctx, "checkpoints/step-1")
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(r.out, "checkpoints", "step-1")); err != nil {
		t.Fatal(err)
	}
	if err := tier.Restore(ctx, r.bs, r.o, c); err == nil {
		t.Fatal("restore over a planted link succeeded")
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("restore wrote through the planted link: %v", ents)
	}
	if fi, err := os.Lstat(filepath.Join(r.out, "checkpoints", "step-1")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the job's link was replaced: %v, %v", fi, err)
	}
}
