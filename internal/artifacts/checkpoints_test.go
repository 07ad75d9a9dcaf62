package artifacts

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// torchSave returns a zip archive laid out as torch.save writes one.
func torchSave(t testing.TB) []byte {
	t.Helper()
	var b bytes.Buffer
	w := zip.NewWriter(&b)
	for name, data := range map[string]string{"archive/data.pkl": "\x80\x02}q\x00.", "archive/data/0": strings.Repeat("\x00\x01", 64), "archive/version": "3\n"} {
		f, err := w.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Store})
		if err != nil {
			t.Fatal(err)
		}
		f.Write([]byte(data))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// at sets the modification time of the files to base plus i seconds.
func at(t testing.TB, base time.Time, i int, paths ...string) {
	t.Helper()
	for _, p := range paths {
		tm := base.Add(time.Duration(i) * time.Second)
		if err := os.Chtimes(p, tm, tm); err != nil {
			t.Fatal(err)
		}
	}
}

// Each rule of domain.CheckpointMarker makes a checkpoint complete, and
// nothing else does; what is not complete says what would make it so.
func TestCheckpointRules(t *testing.T) {
	out := t.TempDir()
	ck := filepath.Join(out, CheckpointsDir)
	p := func(name string) string { return filepath.Join(ck, filepath.FromSlash(name)) }
	z := torchSave(t)
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	write(t, p("hparams.yaml"), "lr: 0.1\n")
	write(t, p("model.bin"), "weights")
	write(t, p("model.bin.complete"), "")
	write(t, p("epoch=3.ckpt"), string(z))
	write(t, p("cut.pt"), string(z[:len(z)-1]))
	write(t, p("half.pt"), string(z[:len(z)/2]))
	write(t, p("checkpoint-10/model.safetensors"), "w")
	write(t, p("checkpoint-10/trainer_state.json"), "{}")
	write(t, p("checkpoint-20/model.safetensors"), "w")
	write(t, p("hf-like/trainer_state.json"), "{}")
	write(t, p("step-1/w"), "w")
	write(t, p("step-1/.complete"), "")
	write(t, p("step-2/w"), "w")
	write(t, p("orphan.complete"), "")
	write(t, p("x.tmp"), "")
	write(t, p(".hidden"), "")
	// Completion times: the marker's, the trainer state's, the zip's own.
	at(t, base, 0, p("model.bin"), p("checkpoint-10/model.safetensors"), p("step-1/w"))
	at(t, base, 1, p("epoch=3.ckpt"))
	at(t, base, 2, p("hparams.yaml"), p("cut.pt"), p("half.pt"), p("checkpoint-20/model.safetensors"), p("hf-like/trainer_state.json"), p("step-2/w"))
	at(t, base, 3, p("step-1/.complete"))
	at(t, base, 4, p("checkpoint-10/trainer_state.json"))
	at(t, base, 5, p("model.bin.complete"))

	found, err := open(t, out).Checkpoints()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range found {
		got = append(got, fmt.Sprintf("%s:%v@%d", f.Name, f.Complete, int(f.ModTime.Sub(base).Seconds())))
		if f.Complete != (f.Why == "") {
			t.Errorf("%s: complete %v, why %q: a reason exactly when not complete", f.Name, f.Complete, f.Why)
		}
	}
	want := "[epoch=3.ckpt:true@1 checkpoint-20:false@2 cut.pt:false@2 half.pt:false@2 hf-like:false@2 hparams.yaml:false@2 step-2:false@2 step-1:true@3 checkpoint-10:true@4 model.bin:true@5]"
	if fmt.Sprint(got) != want {
		t.Fatalf("checkpoints =\n%v, want\n%s", got, want)
	}
	why := map[string]string{}
	for _, f := range found {
		why[f.Name] = f.Why
	}
	for name, words := range map[string][]string{
		"hparams.yaml":  {"no marker", "hparams.yaml.complete", "save_checkpoint"},
		"cut.pt":        {"zip", "cut.pt.complete"},
		"half.pt":       {"zip", "half.pt.complete"},
		"checkpoint-20": {"trainer_state.json", ".complete", "checkpoint_done"},
		"hf-like":       {"no .complete marker inside", "checkpoint_done"},
		"step-2":        {"no .complete marker inside", "checkpoint_done"},
	} {
		for _, w := range words {
			if !strings.Contains(why[name], w) {
				t.Errorf("why %s: %q, want it to say %q", name, why[name], w)
			}
		}
	}
}

// Digest follows its definition: the bytes of a file; for a directory
// the lines of its files in the lexical order of their paths, without its
// marker.
func TestDigest(t *testing.T) {
	out := t.TempDir()
	ck := filepath.Join(out, CheckpointsDir)
	p := func(name string) string { return filepath.Join(ck, filepath.FromSlash(name)) }
	z := torchSave(t)
	write(t, p("model.bin"), "weights")
	write(t, p("model.bin.complete"), "marker text is no data")
	write(t, p("e.ckpt"), string(z))
	write(t, p("step-1/a/x"), "1")
	write(t, p("step-1/a.txt"), "22")
	write(t, p("step-1/a-b"), "333")
	write(t, p("step-1/sub/.complete"), "4444")
	write(t, p("step-1/.complete"), "done")
	write(t, p("checkpoint-7/trainer_state.json"), "{}")
	write(t, p("checkpoint-7/w"), "w")
	write(t, p("loose.pt"), "loose")
	write(t, p("step-2/w"), "w")
	d := open(t, out)

	line := func(data, path string) string { return fmt.Sprintf("%s  %d  %s\n", sum(data), len(data), path) }
	for name, want := range map[string]Found{
		"model.bin": {SHA256: sum("weights"), Size: 7, Files: 1},
		"e.ckpt":    {SHA256: sum(string(z)), Size: int64(len(z)), Files: 1},
		// "a-b" < "a.txt" < "a/x": the order of whole paths, not of the walk.
		"step-1":       {SHA256: sum(line("333", "a-b") + line("22", "a.txt") + line("1", "a/x") + line("4444", "sub/.complete")), Size: 14, Files: 5},
		"checkpoint-7": {SHA256: sum(line("{}", "trainer_state.json") + line("w", "w")), Size: 3, Files: 2},
	} {
		c, err := d.Digest(name)
		if err != nil {
			t.Errorf("Digest(%s): %v", name, err)
			continue
		}
		if c.SHA256 != want.SHA256 || c.Size != want.Size || c.Files != want.Files || !c.Complete || c.Name != name || c.Path != p(name) || c.ModTime.IsZero() {
			t.Errorf("Digest(%s) = %+v, want sha %s, %d bytes in %d files", name, c, want.SHA256, want.Size, want.Files)
		}
	}
	found, _ := d.Checkpoints()
	for _, f := range found {
		if c, err := d.Digest(f.Name); err == nil && (c.Size != f.Size || c.Files != f.Files || !c.ModTime.Equal(f.ModTime)) {
			t.Errorf("Digest(%s) = %d bytes in %d files at %s, the listing %d in %d at %s", f.Name, c.Size, c.Files, c.ModTime, f.Size, f.Files, f.ModTime)
		}
	}
	for _, name := range []string{"loose.pt", "step-2"} {
		if _, err := d.Digest(name); !errors.Is(err, ErrIncomplete) {
			t.Errorf("Digest(%s) of an incomplete checkpoint: %v, want ErrIncomplete", name, err)
		}
	}
	if _, err := d.Digest("missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Digest(missing): %v, want fs.ErrNotExist", err)
	}
	for _, name := range []string{"", ".", "..", "../x", "step-1/a", ".complete", "model.bin.complete", "x.tmp"} {
		if _, err := d.Digest(name); err == nil {
			t.Errorf("Digest(%q) succeeded", name)
		}
	}
}

// MarkComplete makes a file a checkpoint with the marker beside it.
func TestMarkCompleteFile(t *testing.T) {
	out := t.TempDir()
	ck := filepath.Join(out, CheckpointsDir)
	write(t, filepath.Join(ck, "hparams.yaml"), "lr: 1")
	write(t, filepath.Join(ck, "kept.bin"), "k")
	write(t, filepath.Join(ck, "kept.bin.complete"), "kept")
	d := open(t, out)
	for range 2 {
		for _, name := range []string{"hparams.yaml", "kept.bin"} {
			if err := d.MarkComplete(name); err != nil {
				t.Fatalf("MarkComplete(%s): %v", name, err)
			}
		}
	}
	if fi, err := os.Lstat(filepath.Join(ck, "hparams.yaml.complete")); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("no marker beside the file: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(ck, "kept.bin.complete")); string(b) != "kept" {
		t.Errorf("an existing marker was rewritten: %q", b)
	}
	found, err := d.Checkpoints()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range found {
		got = append(got, fmt.Sprintf("%s:%v:%d:%d", f.Name, f.Complete, f.Files, f.Size))
	}
	if want := "[hparams.yaml:true:1:5 kept.bin:true:1:1]"; fmt.Sprint(got) != want && fmt.Sprint(got) != "[kept.bin:true:1:1 hparams.yaml:true:1:5]" {
		t.Errorf("checkpoints = %v, want %s (the markers not listed)", got, want)
	}
	for _, name := range []string{"missing", "../x", ".hidden", "hparams.yaml.complete"} {
		if err := d.MarkComplete(name); err == nil {
			t.Errorf("MarkComplete(%q) succeeded", name)
		}
	}
}
