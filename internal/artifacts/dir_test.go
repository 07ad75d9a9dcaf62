package artifacts

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"trainyard/internal/domain"
)

// trap is what a hostile job plants in its output directory out: links to
// a file and a directory outside it (victim, holding a secret), a link
// climbing out with "..", a fifo and a socket. It returns the victim file.
func trap(t *testing.T, out string) string {
	t.Helper()
	outside := t.TempDir()
	victim := filepath.Join(outside, "shadow")
	write(t, victim, "secret")
	if err := os.Chmod(victim, 0o640); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(out, "real.txt"), "mine")
	for name, target := range map[string]string{
		"output.txt":     victim,
		"etc":            outside,
		"up.txt":         "../../../../../../../../.." + victim,
		"inner-link.txt": "real.txt",
	} {
		if err := os.Symlink(target, filepath.Join(out, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(out, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(out, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return victim
}

// within fails the test when f does not return in time: opening a fifo for
// reading waits for a writer forever.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s blocked (on the fifo?)", what)
	}
}

// A manifest records the job's own regular files only: a link to a file
// elsewhere is neither hashed nor listed, and a fifo does not block it.
func TestManifestOfAHostileDirectory(t *testing.T) {
	out := t.TempDir()
	trap(t, out)
	var files []domain.ArtifactFile
	var err error
	within(t, "Manifest", func() { files, err = Manifest(out) })
	if err != nil {
		t.Fatal(err)
	}
	if want := "[{real.txt 4 " + sum("mine") + "}]"; fmt.Sprint(files) != want {
		t.Fatalf("manifest = %v, want %s: only the regular file", files, want)
	}
}

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// Open serves regular files only, and nothing outside the directory.
func TestOpenRefusesWhatIsNoRegularFile(t *testing.T) {
	out := t.TempDir()
	trap(t, out)
	d := open(t, out)
	for _, name := range []string{"output.txt", "up.txt", "inner-link.txt", "etc/shadow", "fifo", "sock", ".", "../" + filepath.Base(out) + "/real.txt"} {
		within(t, "Open "+name, func() {
			if f, _, err := d.Open(name); err == nil {
				b, _ := io.ReadAll(f)
				f.Close()
				t.Errorf("Open(%q) served %q", name, b)
			}
		})
	}
	if _, _, err := d.Open("output.txt"); !errors.Is(err, ErrNotRegular) {
		t.Errorf("Open of a link: %v, want ErrNotRegular", err)
	}
	f, fi, err := d.Open("real.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if b, _ := io.ReadAll(f); string(b) != "mine" || fi.Size() != 4 {
		t.Errorf("real.txt read %q (%d bytes)", b, fi.Size())
	}
}

// MakeReadOnly seals the job's own files and leaves what links point to,
// and the links themselves, as they were.
func TestMakeReadOnlyNeverFollowsLinks(t *testing.T) {
	out := t.TempDir()
	victim := trap(t, out)
	within(t, "MakeReadOnly", func() {
		if err := MakeReadOnly(out); err != nil {
			t.Error(err)
		}
	})
	t.Cleanup(func() { os.Chmod(out, 0o755); os.Chmod(filepath.Join(out, "real.txt"), 0o644) })
	if fi, _ := os.Stat(victim); fi.Mode().Perm() != 0o640 {
		t.Errorf("the file a link points to changed mode: %v", fi.Mode())
	}
	if fi, _ := os.Stat(filepath.Dir(victim)); fi.Mode().Perm()&0o200 == 0 {
		t.Errorf("the directory a link points to lost its write permission: %v", fi.Mode())
	}
	if fi, _ := os.Lstat(filepath.Join(out, "fifo")); fi.Mode().Perm() != 0o644 {
		t.Errorf("the fifo changed mode: %v", fi.Mode())
	}
	for _, p := range []string{out, filepath.Join(out, "real.txt")} {
		if fi, _ := os.Stat(p); fi.Mode().Perm()&0o222 != 0 {
			t.Errorf("%s is still writable: %v", p, fi.Mode())
		}
	}
}

// Checkpoints lists the job's own checkpoints only: a checkpoint that is a
// link, or whose marker is one, or a checkpoint directory that is a link,
// does not count.
func TestCheckpointsIgnoreLinks(t *testing.T) {
	out := t.TempDir()
	elsewhere := t.TempDir()
	write(t, filepath.Join(elsewhere, "big", "state"), "stolen")
	write(t, filepath.Join(elsewhere, "big", domain.CheckpointMarker), "")
	ck := filepath.Join(out, CheckpointsDir)
	write(t, filepath.Join(ck, "own", "state"), "x")
	write(t, filepath.Join(ck, "own", domain.CheckpointMarker), "")
	write(t, filepath.Join(ck, "linked-marker", "state"), "y")
	if err := os.Symlink(filepath.Join(elsewhere, "big", domain.CheckpointMarker), filepath.Join(ck, "linked-marker", domain.CheckpointMarker)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(elsewhere, "big"), filepath.Join(ck, "linked")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(elsewhere, "big", "state"), filepath.Join(ck, "file-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(elsewhere, "big"), filepath.Join(ck, "own", "more")); err != nil {
		t.Fatal(err)
	}
	found, err := open(t, out).Checkpoints()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range found {
		got = append(got, fmt.Sprintf("%s:%v:%d:%d", f.Name, f.Complete, f.Files, f.Size))
	}
	if fmt.Sprint(got) != "[linked-marker:false:1:1 own:true:2:1]" && fmt.Sprint(got) != "[own:true:2:1 linked-marker:false:1:1]" {
		t.Fatalf("checkpoints = %v, want own (complete, its 2 files) and linked-marker (incomplete)", got)
	}

	// The whole checkpoint directory a link elsewhere: no checkpoints.
	out2 := t.TempDir()
	if err := os.Symlink(elsewhere, filepath.Join(out2, CheckpointsDir)); err != nil {
		t.Fatal(err)
	}
	if found, err := open(t, out2).Checkpoints(); err != nil || len(found) != 0 {
		t.Fatalf("checkpoints through a linked directory = %v, %v", found, err)
	}
}

// MarkComplete never creates or truncates a file through a link planted
// as the marker or as the checkpoint directory.
func TestMarkCompleteRefusesLinks(t *testing.T) {
	out := t.TempDir()
	elsewhere := t.TempDir()
	victim := filepath.Join(elsewhere, "victim")
	write(t, victim, "precious")
	ck := filepath.Join(out, CheckpointsDir)
	write(t, filepath.Join(ck, "x", "state"), "")
	write(t, filepath.Join(ck, "dangling", "state"), "")
	write(t, filepath.Join(ck, "done", domain.CheckpointMarker), "kept")
	write(t, filepath.Join(ck, "fresh", "state"), "")
	for link, target := range map[string]string{
		filepath.Join(ck, "x", domain.CheckpointMarker):        victim,
		filepath.Join(ck, "dangling", domain.CheckpointMarker): filepath.Join(elsewhere, "created"),
		filepath.Join(ck, "linked"):                            elsewhere,
	} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	d := open(t, out)
	for _, name := range []string{"x", "dangling", "linked"} {
		if err := d.MarkComplete(name); err == nil {
			t.Errorf("MarkComplete(%s) through a link succeeded", name)
		}
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Errorf("the file the marker links to holds %q", b)
	}
	for _, p := range []string{filepath.Join(elsewhere, "created"), filepath.Join(elsewhere, domain.CheckpointMarker)} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s was created through a link", p)
		}
	}
	for _, name := range []string{"done", "fresh"} {
		if err := d.MarkComplete(name); err != nil {
			t.Errorf("MarkComplete(%s): %v", name, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(ck, "done", domain.CheckpointMarker)); string(b) != "kept" {
		t.Errorf("an existing marker was rewritten: %q %v", b, err)
	}
	if fi, err := os.Lstat(filepath.Join(ck, "fresh", domain.CheckpointMarker)); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("no marker written: %v", err)
	}
}

// Files hands over the regular files of a checkpoint only.
func TestFilesSkipsLinks(t *testing.T) {
	out := t.TempDir()
	ck := filepath.Join(out, CheckpointsDir, "c")
	write(t, filepath.Join(ck, "a", "w.bin"), "w")
	trap(t, ck)
	var got []string
	within(t, "Files", func() {
		err := open(t, out).Files(CheckpointsDir+"/c", func(name string, f *os.File, fi fs.FileInfo) error {
			b, _ := io.ReadAll(f)
			got = append(got, fmt.Sprintf("%s=%s", name, b))
			return nil
		})
		if err != nil {
			t.Error(err)
		}
	})
	if want := "[checkpoints/c/a/w.bin=w checkpoints/c/real.txt=mine]"; fmt.Sprint(got) != want {
		t.Fatalf("files = %v, want %s", got, want)
	}
}

// RemoveAll removes links, not what they point to, and opens read-only
// outputs for removal.
func TestRemoveAllRemovesLinksNotTargets(t *testing.T) {
	out := t.TempDir()
	victim := trap(t, out)
	write(t, filepath.Join(out, "eval", "r.txt"), "r")
	if err := os.Symlink(filepath.Dir(victim), filepath.Join(out, "eval", "etc")); err != nil {
		t.Fatal(err)
	}
	if err := MakeReadOnly(out); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(out, 0o755) })
	d := open(t, out)
	for _, name := range []string{"etc", "output.txt", "eval"} {
		if err := d.RemoveAll(name); err != nil {
			t.Fatalf("RemoveAll(%s): %v", name, err)
		}
		if _, err := os.Lstat(filepath.Join(out, name)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still there: %v", name, err)
		}
	}
	if b, err := os.ReadFile(victim); string(b) != "secret" {
		t.Fatalf("the linked file is gone or changed: %q %v", b, err)
	}
	for _, name := range []string{".", "..", "../x", "/etc"} {
		if err := d.RemoveAll(name); err == nil {
			t.Errorf("RemoveAll(%q) was accepted", name)
		}
	}
}

// A job cannot make a checkpoint complete with a link or a fifo in place of
// its data, its marker or its trainer state, nor hold the server with a
// fifo anywhere in its checkpoints: each is looked at, never waited on.
func TestCheckpointTraps(t *testing.T) {
	out := t.TempDir()
	elsewhere := t.TempDir()
	secret := filepath.Join(elsewhere, "secret")
	write(t, secret, "secret")
	stolen := filepath.Join(elsewhere, "whole.ckpt")
	write(t, stolen, string(torchSave(t)))
	ck := filepath.Join(out, CheckpointsDir)
	p := func(name string) string { return filepath.Join(ck, filepath.FromSlash(name)) }
	link := func(target, name string) {
		t.Helper()
		if err := os.Symlink(target, p(name)); err != nil {
			t.Fatal(err)
		}
	}
	fifo := func(name string) {
		t.Helper()
		if err := syscall.Mkfifo(p(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Files whose marker is no regular file of their own.
	write(t, p("linked.bin"), "l")
	link(secret, "linked.bin.complete")
	write(t, p("dangling.bin"), "d")
	link(filepath.Join(elsewhere, "created"), "dangling.bin.complete")
	write(t, p("piped.bin"), "p")
	fifo("piped.bin.complete")
	// Data that is no regular file: a zip elsewhere, a fifo with a marker.
	link(stolen, "stolen.ckpt")
	link("../../"+filepath.Base(out)+"/checkpoints/own.ckpt", "alias.ckpt")
	write(t, p("own.ckpt"), string(torchSave(t)))
	fifo("pipe.pt")
	write(t, p("pipe.pt.complete"), "")
	// Directories whose marker or trainer state is no regular file.
	write(t, p("checkpoint-5/w"), "5")
	link(secret, "checkpoint-5/trainer_state.json")
	write(t, p("checkpoint-6/w"), "6")
	fifo("checkpoint-6/trainer_state.json")
	write(t, p("dir-fifo/w"), "f")
	fifo("dir-fifo/.complete")
	// A complete directory with a fifo and a link among its files.
	write(t, p("mixed/w"), "m")
	write(t, p("mixed/.complete"), "")
	fifo("mixed/pipe")
	link(secret, "mixed/leak")

	d := open(t, out)
	var found []Found
	within(t, "Checkpoints", func() {
		var err error
		if found, err = d.Checkpoints(); err != nil {
			t.Error(err)
		}
	})
	var got []string
	for _, f := range found {
		got = append(got, fmt.Sprintf("%s:%v", f.Name, f.Complete))
		if !f.Complete && f.Why == "" {
			t.Errorf("%s: not complete and no reason", f.Name)
		}
	}
	slices.Sort(got)
	if want := "[checkpoint-5:false checkpoint-6:false dangling.bin:false dir-fifo:false linked.bin:false mixed:true own.ckpt:true piped.bin:false]"; fmt.Sprint(got) != want {
		t.Fatalf("checkpoints = %v, want %s: no link, no fifo counts", got, want)
	}
	for _, f := range found {
		if f.Name == "linked.bin" && !strings.Contains(f.Why, "symbolic link") {
			t.Errorf("why linked.bin: %q, want it to name the link", f.Why)
		}
	}

	for name, want := range map[string]error{"linked.bin": ErrIncomplete, "piped.bin": ErrIncomplete, "checkpoint-5": ErrIncomplete,
		"checkpoint-6": ErrIncomplete, "dir-fifo": ErrIncomplete, "stolen.ckpt": ErrNotRegular, "alias.ckpt": ErrNotRegular, "pipe.pt": ErrNotRegular} {
		within(t, "Digest "+name, func() {
			if c, err := d.Digest(name); !errors.Is(err, want) {
				t.Errorf("Digest(%s) = %+v, %v; want an error matching %v", name, c, err, want)
			}
		})
	}
	within(t, "Digest mixed", func() {
		c, err := d.Digest("mixed")
		if want := sum(sum("m") + "  1  w\n"); err != nil || c.SHA256 != want || c.Files != 2 {
			t.Errorf("Digest(mixed) = %+v, %v; want %s of its one data file (no fifo, no link)", c, err, want)
		}
	})

	for _, name := range []string{"linked.bin", "dangling.bin", "piped.bin", "stolen.ckpt", "pipe.pt"} {
		within(t, "MarkComplete "+name, func() {
			if err := d.MarkComplete(name); err == nil {
				t.Errorf("MarkComplete(%s) succeeded", name)
			}
		})
	}
	if b, _ := os.ReadFile(secret); string(b) != "secret" {
		t.Errorf("the file a marker links to holds %q", b)
	}
	for _, f := range []string{filepath.Join(elsewhere, "created"), stolen + domain.CheckpointMarker} {
		if _, err := os.Lstat(f); err == nil {
			t.Errorf("%s was created through a link", f)
		}
	}
}
