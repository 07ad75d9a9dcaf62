package artifacts

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"trainyard/internal/domain"
)

func write(t testing.TB, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// open opens dir as an output directory for the test.
func open(t testing.TB, dir string) *Dir {
	t.Helper()
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestManifest(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "model.pt"), "weights")
	write(t, filepath.Join(dir, "eval", "report.txt"), "acc=0.9\n")
	write(t, filepath.Join(dir, "checkpoints", "ckpt-1.json"), "{}")
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	files, err := Manifest(dir, "checkpoints")
	if err != nil {
		t.Fatal(err)
	}
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	want := []domain.ArtifactFile{{Path: "eval/report.txt", Size: 8, SHA256: sum("acc=0.9\n")}, {Path: "model.pt", Size: 7, SHA256: sum("weights")}}
	if fmt.Sprint(files) != fmt.Sprint(want) {
		t.Fatalf("manifest = %v, want %v (checkpoints and links left out)", files, want)
	}
	if files, err := Manifest(filepath.Join(dir, "missing")); err != nil || len(files) != 0 {
		t.Fatalf("missing dir: %v, %v", files, err)
	}
}

func TestCheckpoints(t *testing.T) {
	out := t.TempDir()
	dir := filepath.Join(out, CheckpointsDir)
	write(t, filepath.Join(dir, "ckpt-1.json"), "{}")
	write(t, filepath.Join(dir, "step-2", "state"), "xx")
	write(t, filepath.Join(dir, "step-2", domain.CheckpointMarker), "")
	write(t, filepath.Join(dir, "step-3", "state"), "partial")
	write(t, filepath.Join(dir, "ckpt-4.json.tmp"), "{")
	write(t, filepath.Join(dir, ".hidden"), "")
	old := time.Now().Add(-time.Hour)
	os.Chtimes(filepath.Join(dir, "ckpt-1.json"), old, old)
	found, err := open(t, out).Checkpoints()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range found {
		got = append(got, fmt.Sprintf("%s:%v:%d:%d", f.Name, f.Complete, f.Files, f.Size))
	}
	// A file alone is no checkpoint: it may be a config, or half-written.
	want := "[ckpt-1.json:false:1:2 step-2:true:2:2 step-3:false:1:7]"
	if fmt.Sprint(got) != want && fmt.Sprint(got) != "[ckpt-1.json:false:1:2 step-3:false:1:7 step-2:true:2:2]" {
		t.Fatalf("checkpoints = %v, want %s", got, want)
	}
	if found[0].Path != filepath.Join(dir, "ckpt-1.json") {
		t.Errorf("path = %s, want %s", found[0].Path, filepath.Join(dir, "ckpt-1.json"))
	}
}

func TestPlan(t *testing.T) {
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	jobs := []FinishedJob{
		{ID: 1, Project: "vision", Pool: "standard", FinishedAt: now.Add(-20 * day),
			Checkpoints: []domain.CheckpointRecord{{Name: "a", Size: 1}},
			Outputs:     []domain.ArtifactFile{{Path: "eval/r.txt"}, {Path: "models/m.pt"}, {Path: "x.csv"}}},
		{ID: 2, Project: "nlp", Pool: "scratch", FinishedAt: now.Add(-3 * day),
			Checkpoints: []domain.CheckpointRecord{{Name: "b"}}, Outputs: []domain.ArtifactFile{{Path: "x.csv"}, {Path: "eval/r.txt"}}},
		{ID: 3, Project: "nlp", Pool: "standard", FinishedAt: now.Add(-3 * day), Checkpoints: []domain.CheckpointRecord{{Name: "c"}}},
	}
	policies := []Policy{
		{Checkpoints: domain.Duration(30 * day), Reports: domain.Duration(10 * day)},
		{Project: "vision", Checkpoints: domain.Duration(14 * day)},
		{Pool: "scratch", Checkpoints: domain.Duration(2 * day), Reports: domain.Duration(day), ReportPaths: []string{"*.csv"}},
	}
	if err := ValidatePolicies(policies); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range Plan(jobs, policies, now) {
		got = append(got, fmt.Sprintf("%d:%s:%s", d.JobID, d.Kind, d.Path))
	}
	// Job 1: vision's policy (no report rule) removes its checkpoint only.
	// Job 2: scratch removes its checkpoint and *.csv, not eval/.
	// Job 3: the default keeps checkpoints 30 days.
	if want := "[1:checkpoint:a 2:checkpoint:b 2:output:x.csv]"; fmt.Sprint(got) != want {
		t.Fatalf("plan = %v, want %s", got, want)
	}
	if err := ValidatePolicies([]Policy{{Project: "a"}, {Project: "a"}}); err == nil {
		t.Fatal("a repeated selector was accepted")
	}
}

func TestMakeReadOnly(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a", "b.txt"), "x")
	if err := MakeReadOnly(dir); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, filepath.Join(dir, "a"), filepath.Join(dir, "a", "b.txt")} {
		fi, _ := os.Stat(p)
		if fi.Mode().Perm()&0o222 != 0 {
			t.Errorf("%s is still writable: %v", p, fi.Mode())
		}
	}
	t.Cleanup(func() { filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error { return os.Chmod(p, 0o755) }) })
}

// BenchmarkManifest10k builds the manifest of 10,000 files of 4 KiB.
func BenchmarkManifest10k(b *testing.B) {
	dir := b.TempDir()
	data := string(make([]byte, 4096))
	for i := range 10_000 {
		write(b, filepath.Join(dir, fmt.Sprintf("d%02d", i%100), fmt.Sprintf("f%05d.bin", i)), data)
	}
	b.ResetTimer()
	for b.Loop() {
		files, err := Manifest(dir)
		if err != nil || len(files) != 10_000 {
			b.Fatal(len(files), err)
		}
	}
}
