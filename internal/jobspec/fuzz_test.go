package jobspec

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"trainyard/internal/domain"
)

// FuzzLoad feeds arbitrary documents and overrides to Load. Load must not
// panic, must fail only with domain.FieldErrors, and a spec it accepts must
// survive a canonical round trip unchanged.
func FuzzLoad(f *testing.F) {
	for _, pat := range []string{"testdata/*/*.yaml", "testdata/*/*.json", "../../examples/*.yaml"} {
		files, _ := filepath.Glob(pat)
		for _, file := range files {
			doc, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(doc, "")
		}
	}
	f.Add([]byte(minimal), "params.lr=0.2")
	f.Add([]byte(minimal), "resources.memory=1.5Gi")
	f.Add([]byte(minimal), "entrypoint=exit 3")
	f.Fuzz(func(t *testing.T, doc []byte, set string) {
		var sets []string
		if set != "" {
			sets = []string{set}
		}
		s, err := Load(doc, sets)
		if err != nil {
			var fes domain.FieldErrors
			if !errors.As(err, &fes) || len(fes) == 0 {
				t.Fatalf("error %T %v is not non-empty FieldErrors", err, err)
			}
			return
		}
		c1, h1 := Canonical(s)
		s2, err := Load(c1, nil)
		if err != nil {
			t.Fatalf("canonical JSON does not load back: %v\n%s", err, c1)
		}
		c2, h2 := Canonical(s2)
		if !bytes.Equal(c1, c2) || h1 != h2 {
			t.Fatalf("round trip changed the spec:\n%s\n%s", c1, c2)
		}
	})
}

func BenchmarkLoad(b *testing.B) {
	doc := []byte(`name: resnet50-baseline
project: vision
pool: standard
env: pytorch-2.4@3
entrypoint: [python3, train.py, --epochs, "3"]
resources: {gpus: 1, cpus: 8, memory: 32GiB}
params: {lr: "0.1", batch_size: "256"}
policy: {timeout: 24h, retries: 2, reentrant: true}
labels: {team: vision}
`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Load(doc, []string{"params.lr=0.2"}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCanonical(b *testing.B) {
	s, err := Load([]byte(minimal), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		Canonical(s)
	}
}
