package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/client"
	"trainyard/internal/codepkg"
)

// uploadContext implements submit --context DIR: it packages dir, reports
// the package on w, uploads it unless the server has it already, and returns
// the reference the submit carries. An empty dir returns nil.
func (a *app) uploadContext(ctx context.Context, c *client.Client, w io.Writer, dir string, req apitypes.SubmitRequest) (*apitypes.CodeRef, error) {
	if dir == "" {
		return nil, nil
	}
	pkg, err := codepkg.Build(dir, codepkg.Options{})
	if err != nil {
		return nil, err
	}
	defer pkg.Remove()
	fmt.Fprintf(w, "code package %s (%s)\n", pkg.SHA256, describePackage(pkg))
	if specSetsWorkdir(req) {
		fmt.Fprintln(w, "note: the spec sets workdir, so the job runs there; the code package is unpacked at $TRAINYARD_CODE_DIR (drop workdir to run in the package)")
	}
	ref := &apitypes.CodeRef{SHA256: pkg.SHA256, Commit: pkg.Commit, Dirty: pkg.Dirty}
	have, err := c.CodeExists(ctx, pkg.SHA256)
	if err != nil {
		return nil, fmt.Errorf("check whether the server has code package %s: %w", pkg.SHA256, err)
	}
	if have {
		fmt.Fprintln(w, "code package already uploaded")
		return ref, nil
	}
	f, err := os.Open(pkg.Path)
	if err != nil {
		return nil, fmt.Errorf("open code package: %w", err)
	}
	defer f.Close()
	var r io.Reader = f
	var bar *progressBar
	if a.env.isTerminal(w) {
		bar = &progressBar{w: w, total: pkg.Size, start: time.Now()}
		r = &progressReader{r: f, bar: bar}
	}
	_, err = c.UploadCode(ctx, pkg.SHA256, r, pkg.Size)
	if bar != nil {
		bar.finish(err == nil)
	}
	if err != nil {
		return nil, fmt.Errorf("upload code package %s: %w", pkg.SHA256, err)
	}
	fmt.Fprintf(w, "code package uploaded (%s)\n", codepkg.FormatBytes(pkg.Size))
	return ref, nil
}

// describePackage is "12 files, 1.2 MiB, commit 0123456789ab, dirty".
func describePackage(p codepkg.Package) string {
	parts := []string{fmt.Sprintf("%d files", p.Files), codepkg.FormatBytes(p.Size)}
	if p.Commit != "" {
		parts = append(parts, "commit "+p.Commit[:min(12, len(p.Commit))])
	} else {
		parts = append(parts, "no git commit")
	}
	if p.Dirty {
		parts = append(parts, "dirty")
	} else if p.Commit != "" {
		parts = append(parts, "clean")
	}
	return strings.Join(parts, ", ")
}

// specSetsWorkdir reports whether the submitted spec (text or --set) sets
// workdir.
func specSetsWorkdir(req apitypes.SubmitRequest) bool {
	// The last --set of workdir wins; ~ (or null, or nothing) clears it.
	for i := len(req.Set) - 1; i >= 0; i-- {
		if k, v, _ := strings.Cut(req.Set[i], "="); strings.TrimSpace(k) == "workdir" {
			v = strings.TrimSpace(v)
			return v != "" && v != "~" && v != "null"
		}
	}
	var text string
	if err := json.Unmarshal(req.Spec, &text); err != nil {
		return false
	}
	var top map[string]any
	if err := yaml.Unmarshal([]byte(text), &top); err != nil {
		return false
	}
	wd, ok := top["workdir"].(string)
	return ok && wd != ""
}

// progressBar draws "upload [#####.....]  52%  5.2/10.0 MiB" on one
// terminal line, at most every 100ms.
type progressBar struct {
	mu    sync.Mutex
	w     io.Writer
	total int64
	done  int64
	start time.Time
	drawn time.Time
}

func (b *progressBar) add(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done += int64(n)
	if now := time.Now(); now.Sub(b.drawn) >= 100*time.Millisecond || b.done >= b.total {
		b.drawn = now
		b.draw()
	}
}

func (b *progressBar) draw() {
	const width = 30
	frac := 1.0
	if b.total > 0 {
		frac = min(1, float64(b.done)/float64(b.total))
	}
	n := int(frac * width)
	fmt.Fprintf(b.w, "\rupload [%s%s] %3.0f%%  %s/%s ", strings.Repeat("#", n), strings.Repeat(".", width-n),
		frac*100, codepkg.FormatBytes(b.done), codepkg.FormatBytes(b.total))
}

// finish ends the bar's line.
func (b *progressBar) finish(ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ok {
		b.done = b.total
	}
	b.draw()
	fmt.Fprintln(b.w)
}

// progressReader feeds a progressBar.
type progressReader struct {
	r   io.Reader
	bar *progressBar
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.bar.add(n)
	return n, err
}

// codeLine is show's view of a job's code package: "sha256:… (commit
// 0123456789ab, dirty)".
func codeLine(c *apitypes.CodeRef) string {
	var parts []string
	if c.Commit != "" {
		parts = append(parts, "commit "+c.Commit)
	} else {
		parts = append(parts, "no git commit")
	}
	if c.Dirty {
		parts = append(parts, "dirty")
	} else if c.Commit != "" {
		parts = append(parts, "clean")
	}
	return oneLine(c.SHA256 + " (" + strings.Join(parts, ", ") + ")")
}
