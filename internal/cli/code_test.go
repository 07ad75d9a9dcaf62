package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/codepkg"
)

func TestDescribePackage(t *testing.T) {
	tests := map[string]struct {
		p    codepkg.Package
		want string
	}{
		"clean":      {codepkg.Package{Files: 3, Size: 2048, Commit: strings.Repeat("ab", 20)}, "3 files, 2.0 KiB, commit abababababab, clean"},
		"dirty":      {codepkg.Package{Files: 1, Size: 10, Commit: strings.Repeat("c", 40), Dirty: true}, "1 files, 10 B, commit cccccccccccc, dirty"},
		"no git":     {codepkg.Package{Files: 2, Size: 3 << 20}, "2 files, 3.0 MiB, no git commit"},
		"no commits": {codepkg.Package{Files: 2, Size: 5, Dirty: true}, "2 files, 5 B, no git commit, dirty"},
	}
	for name, tc := range tests {
		if got := describePackage(tc.p); got != tc.want {
			t.Errorf("%s: %q, want %q", name, got, tc.want)
		}
	}
	if got := codeLine(&apitypes.CodeRef{SHA256: "sha256:x", Commit: "abc", Dirty: true}); got != "sha256:x (commit abc, dirty)" {
		t.Errorf("codeLine = %q", got)
	}
}

func TestSpecSetsWorkdir(t *testing.T) {
	spec := func(s string) json.RawMessage { b, _ := json.Marshal(s); return b }
	tests := map[string]struct {
		req  apitypes.SubmitRequest
		want bool
	}{
		"none":      {apitypes.SubmitRequest{Spec: spec("name: a\n")}, false},
		"in spec":   {apitypes.SubmitRequest{Spec: spec("name: a\nworkdir: /srv\n")}, true},
		"by --set":  {apitypes.SubmitRequest{Spec: spec("name: a\n"), Set: []string{"workdir=/x"}}, true},
		"other set": {apitypes.SubmitRequest{Spec: spec("name: a\n"), Set: []string{"params.workdir=/x"}}, false},
		"cleared":   {apitypes.SubmitRequest{Spec: spec("name: a\nworkdir: /srv\n"), Set: []string{"workdir=/x", "workdir=~"}}, false},
	}
	for name, tc := range tests {
		if got := specSetsWorkdir(tc.req); got != tc.want {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
}

func TestProgressBar(t *testing.T) {
	var buf bytes.Buffer
	bar := &progressBar{w: &buf, total: 1000}
	r := &progressReader{r: strings.NewReader(strings.Repeat("x", 1000)), bar: bar}
	p := make([]byte, 300)
	for {
		if _, err := r.Read(p); err != nil {
			break
		}
	}
	bar.finish(true)
	out := buf.String()
	if !strings.Contains(out, "100%") || !strings.HasSuffix(out, "\n") || !strings.HasPrefix(out, "\rupload [") {
		t.Errorf("progress output %q", out)
	}
}
