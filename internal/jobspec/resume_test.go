package jobspec

import (
	"errors"
	"strings"
	"testing"

	"trainyard/internal/domain"
)

func TestResumeField(t *testing.T) {
	s, err := Load([]byte("name: r\nentrypoint: [\"true\"]\nresume: {job: 12, checkpoint: ckpt-000300.json}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Resume == nil || *s.Resume != (domain.ResumeFrom{Job: 12, Checkpoint: "ckpt-000300.json"}) {
		t.Fatalf("resume = %+v, want job 12 checkpoint ckpt-000300.json", s.Resume)
	}
	// The canonical snapshot keeps it, and loads back to the same.
	b, _ := Canonical(s)
	again, err := Load(b, nil)
	if err != nil || again.Resume == nil || *again.Resume != *s.Resume {
		t.Fatalf("snapshot %s loads back as %+v, %v", b, again.Resume, err)
	}
	if s, _ := Load([]byte("name: r\nentrypoint: [\"true\"]\n"), nil); s.Resume != nil {
		t.Errorf("a spec without resume has %+v", s.Resume)
	}

	for doc, want := range map[string][]string{
		"resume: {job: 0, checkpoint: a}":       {"resume.job"},
		"resume: {job: 3}":                      {"resume.checkpoint"},
		"resume: {job: 3, checkpoint: a/b}":     {"resume.checkpoint"},
		"resume: {job: x, checkpoint: .hidden}": {"resume.job", "resume.checkpoint"},
		"resume: {job: 3, checkpoint: a, x: 1}": {"resume.x"},
	} {
		_, err := Load([]byte("name: r\nentrypoint: [\"true\"]\n"+doc+"\n"), nil)
		var fe domain.FieldErrors
		if !errors.As(err, &fe) {
			t.Errorf("%s: err = %v, want field errors on %v", doc, err, want)
			continue
		}
		var paths []string
		for _, e := range fe {
			paths = append(paths, e.Path)
		}
		if strings.Join(paths, ",") != strings.Join(want, ",") {
			t.Errorf("%s: errors on %v (%v), want %v", doc, paths, err, want)
		}
	}
}
