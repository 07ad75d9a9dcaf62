package executortest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/logs"
)

// The Fake's files: each attempt's log as a list of lines, and every file
// its Programs write, by absolute path, in memory. Nothing touches the
// disk.

// fakeLine is one line of a Fake attempt's log.
type fakeLine struct {
	t      time.Time
	stream string
	text   string
}

// fakeFile is a file of the Fake's outputs: data, or a symbolic link.
type fakeFile struct {
	data    []byte
	link    string // not empty: a symbolic link to link
	modTime time.Time
}

// line appends a line to ref's log and returns its time.
func (f *Fake) line(ref executor.Ref, stream, text string) time.Time {
	f.init()
	f.mu.Lock()
	defer f.mu.Unlock()
	t := time.Now().UTC()
	if ls := f.logs[ref]; len(ls) > 0 && t.Before(ls[len(ls)-1].t) {
		t = ls[len(ls)-1].t // times never decrease through a log
	}
	f.logs[ref] = append(f.logs[ref], fakeLine{t: t, stream: stream, text: text})
	f.notifyLocked()
	return t
}

// AppendLog appends a line to the log of ref (stream is one of
// executor.StreamStdout, StreamStderr, StreamSystem), as if its process
// or supervisor wrote it.
func (f *Fake) AppendLog(ref executor.Ref, stream, text string) { f.line(ref, stream, text) }

// now returns a modification time later than any before.
func (f *Fake) nowLocked() time.Time {
	t := time.Now().UTC()
	if !t.After(f.lastMod) {
		t = f.lastMod.Add(time.Microsecond)
	}
	f.lastMod = t
	return t
}

func (f *Fake) writeFile(name, data string, appendTo bool) {
	f.init()
	f.mu.Lock()
	defer f.mu.Unlock()
	name = path.Clean(name)
	old := f.files[name]
	if old != nil && old.link != "" {
		return // a write through a link: never followed here
	}
	b := []byte(data)
	if appendTo && old != nil {
		b = append(slices.Clone(old.data), b...)
	}
	f.files[name] = &fakeFile{data: b, modTime: f.nowLocked()}
}

func (f *Fake) putFile(name string, ff *fakeFile) {
	f.init()
	f.mu.Lock()
	defer f.mu.Unlock()
	ff.modTime = f.nowLocked()
	f.files[path.Clean(name)] = ff
}

// removeCheckpointTmp removes the half-written checkpoints (".tmp*",
// "*.tmp") directly below dir, as a supervisor does after the attempt.
func (f *Fake) removeCheckpointTmp(dir string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	prefix := path.Clean(dir) + "/"
	for name := range f.files {
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		first, _, _ := strings.Cut(rest, "/")
		if strings.HasPrefix(first, ".tmp") || strings.HasSuffix(first, ".tmp") {
			delete(f.files, name)
		}
	}
}

// Logs writes the in-memory log of ref per q. A followed log ends once the
// attempt has reported Exited or Lost.
func (f *Fake) Logs(ctx context.Context, ref executor.Ref, q executor.LogQuery, w io.Writer) error {
	f.init()
	sent, first := 0, true
	for {
		f.mu.Lock()
		lines := f.logs[ref]
		evs, known := f.history[ref]
		if _, gone := f.expired[ref.JobID]; gone {
			known = false
		}
		done := ended(evs)
		ch := f.changed
		f.mu.Unlock()
		if !known && len(lines) == 0 && !q.Follow {
			return fmt.Errorf("logs of attempt %s: %w", ref, fs.ErrNotExist)
		}
		var kept []fakeLine
		for _, ln := range lines[sent:] {
			if keepLine(ln, q) {
				kept = append(kept, ln)
			}
		}
		sent = len(lines)
		if first && q.Tail > 0 && len(kept) > q.Tail {
			kept = kept[len(kept)-q.Tail:]
		}
		first = false
		var buf []byte
		for _, ln := range kept {
			if q.Timestamps {
				buf = logs.AppendLine(buf, ln.t, ln.stream, []byte(ln.text))
			} else {
				buf = append(append(buf, ln.text...), '\n')
			}
		}
		if len(buf) > 0 {
			if _, err := w.Write(buf); err != nil {
				return err
			}
		}
		if q.Flush != nil {
			q.Flush()
		}
		if !q.Follow || done {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil
		}
	}
}

func keepLine(ln fakeLine, q executor.LogQuery) bool {
	switch {
	case !q.Timestamps && ln.stream == logs.System:
		return false
	case q.Stream != "" && ln.stream != q.Stream:
		return false
	case !q.Since.IsZero() && ln.t.Before(q.Since):
		return false
	case q.Grep != nil && !q.Grep.MatchString(ln.text):
		return false
	}
	return true
}

// Release records the release of ref (see Released); the Fake holds no
// workspace, and keeps the log. An attempt still running is an error
// matching domain.ErrConflict.
func (f *Fake) Release(ctx context.Context, ref executor.Ref) error {
	f.init()
	f.mu.Lock()
	defer f.mu.Unlock()
	if evs, seen := f.history[ref]; seen && !ended(evs) {
		return fmt.Errorf("release %s: the attempt has not ended: %w", ref, domain.ErrConflict)
	}
	f.releases = append(f.releases, ref)
	return nil
}

// Released returns the Refs of every successful Release call, in order.
func (f *Fake) Released() []executor.Ref {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.releases)
}

// Outputs opens the in-memory output tree dir: the output directory of a
// launch (TRAINYARD_OUTPUT_DIR), or one holding files.
func (f *Fake) Outputs(ctx context.Context, dir string) (executor.Outputs, error) {
	f.init()
	dir = path.Clean(dir)
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.dirs[dir] && !slices.ContainsFunc(slices.Collect(maps.Keys(f.files)), func(n string) bool { return strings.HasPrefix(n, dir+"/") }) {
		return nil, fmt.Errorf("outputs %s: %w", dir, fs.ErrNotExist)
	}
	return &fakeOutputs{f: f, dir: dir}, nil
}

// fakeOutputs is one output tree of the Fake.
type fakeOutputs struct {
	f   *Fake
	dir string
}

type nopCloser struct{ io.ReadSeeker }

func (nopCloser) Close() error { return nil }

// below returns the absolute name of rel, or an error when rel leaves
// the tree.
func (o *fakeOutputs) below(rel string) (string, error) {
	c := path.Clean(rel)
	if rel == "" || path.IsAbs(c) || c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("%q is not a path below the outputs", rel)
	}
	return path.Join(o.dir, c), nil
}

// entries returns the files at or below name, by path.
func (o *fakeOutputs) entries(name string) map[string]*fakeFile {
	out := map[string]*fakeFile{}
	for n, ff := range o.f.files {
		if n == name || strings.HasPrefix(n, name+"/") {
			out[n] = ff
		}
	}
	return out
}

func (o *fakeOutputs) rel(name string) string { return strings.TrimPrefix(name, o.dir+"/") }

func (o *fakeOutputs) Manifest(ctx context.Context, skip ...string) ([]domain.ArtifactFile, error) {
	o.f.mu.Lock()
	defer o.f.mu.Unlock()
	var out []domain.ArtifactFile
	for n, ff := range o.entries(o.dir) {
		rel := o.rel(n)
		if ff.link != "" || slices.ContainsFunc(skip, func(s string) bool { return rel == s || strings.HasPrefix(rel, s+"/") }) {
			continue
		}
		sum := sha256.Sum256(ff.data)
		out = append(out, domain.ArtifactFile{Path: rel, Size: int64(len(ff.data)), SHA256: hex.EncodeToString(sum[:])})
	}
	slices.SortFunc(out, func(a, b domain.ArtifactFile) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

func (o *fakeOutputs) Checkpoints(ctx context.Context) ([]executor.Checkpoint, error) {
	o.f.mu.Lock()
	defer o.f.mu.Unlock()
	root := path.Join(o.dir, executor.CheckpointsDir)
	type found struct {
		executor.Checkpoint
		link   bool      // a link in place of the checkpoint: left out
		latest time.Time // of its files
	}
	byName := map[string]*found{}
	for n, ff := range o.entries(root) {
		rest, ok := strings.CutPrefix(n, root+"/")
		if !ok {
			continue
		}
		name, inside, isDir := strings.Cut(rest, "/")
		if strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".tmp") {
			continue
		}
		c := byName[name]
		if c == nil {
			c = &found{Checkpoint: executor.Checkpoint{Name: name, Location: path.Join(root, name)}}
			byName[name] = c
		}
		switch {
		case !isDir && ff.link != "":
			c.link = true
		case !isDir:
			c.Complete, c.Size, c.Files, c.ModTime = true, int64(len(ff.data)), 1, ff.modTime
		case ff.link == "":
			c.Size += int64(len(ff.data))
			c.Files++
			if ff.modTime.After(c.latest) {
				c.latest = ff.modTime
			}
			if inside == domain.CheckpointMarker {
				c.Complete, c.ModTime = true, ff.modTime
			}
		}
	}
	var out []executor.Checkpoint
	for _, c := range byName {
		if c.link {
			continue
		}
		if c.ModTime.IsZero() {
			c.ModTime = c.latest
		}
		out = append(out, c.Checkpoint)
	}
	slices.SortFunc(out, func(a, b executor.Checkpoint) int {
		if c := a.ModTime.Compare(b.ModTime); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, nil
}

// open returns the regular file name; f.mu is held.
func (o *fakeOutputs) open(name string) (executor.OutputFile, error) {
	ff := o.f.files[name]
	if ff == nil {
		if len(o.entries(name)) > 0 { // a directory
			return executor.OutputFile{}, &fs.PathError{Op: "open", Path: o.rel(name), Err: executor.ErrNotRegular}
		}
		return executor.OutputFile{}, &fs.PathError{Op: "open", Path: o.rel(name), Err: fs.ErrNotExist}
	}
	if ff.link != "" {
		return executor.OutputFile{}, &fs.PathError{Op: "open", Path: o.rel(name), Err: executor.ErrNotRegular}
	}
	return executor.OutputFile{ReadSeekCloser: nopCloser{bytes.NewReader(ff.data)}, Path: o.rel(name), Size: int64(len(ff.data)), ModTime: ff.modTime}, nil
}

func (o *fakeOutputs) Open(ctx context.Context, rel string) (executor.OutputFile, error) {
	name, err := o.below(rel)
	if err != nil {
		return executor.OutputFile{}, err
	}
	o.f.mu.Lock()
	defer o.f.mu.Unlock()
	return o.open(name)
}

func (o *fakeOutputs) Walk(ctx context.Context, rel string, fn func(executor.OutputFile) error) error {
	name, err := o.below(rel)
	if err != nil {
		return err
	}
	o.f.mu.Lock()
	var files []executor.OutputFile
	names := slices.Sorted(maps.Keys(o.entries(name)))
	if len(names) == 0 {
		o.f.mu.Unlock()
		return &fs.PathError{Op: "walk", Path: rel, Err: fs.ErrNotExist}
	}
	for _, n := range names {
		if f, err := o.open(n); err == nil {
			files = append(files, f)
		}
	}
	o.f.mu.Unlock()
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(f); err != nil {
			return err
		}
	}
	return nil
}

func (o *fakeOutputs) MarkComplete(ctx context.Context, name string) error {
	if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
		return fmt.Errorf("%q is not a checkpoint name", name)
	}
	dir := path.Join(o.dir, executor.CheckpointsDir, name)
	o.f.mu.Lock()
	defer o.f.mu.Unlock()
	if o.f.files[dir] != nil || len(o.entries(dir)) == 0 {
		return fmt.Errorf("%s is not a directory", dir)
	}
	marker := path.Join(dir, domain.CheckpointMarker)
	if m := o.f.files[marker]; m != nil {
		if m.link != "" {
			return fmt.Errorf("%s is a symbolic link, not a regular file", marker)
		}
		return nil
	}
	o.f.files[marker] = &fakeFile{modTime: o.f.nowLocked()}
	return nil
}

// MakeReadOnly: the Fake's Programs never change a tree after their
// attempt, so there is nothing to seal.
func (o *fakeOutputs) MakeReadOnly(ctx context.Context) error { return ctx.Err() }

func (o *fakeOutputs) Remove(ctx context.Context, rel string) error {
	name, err := o.below(rel)
	if err != nil {
		return err
	}
	if name == o.dir {
		return fmt.Errorf("remove %q: not a path below the outputs", rel)
	}
	o.f.mu.Lock()
	defer o.f.mu.Unlock()
	for n := range o.entries(name) {
		delete(o.f.files, n)
	}
	return nil
}

func (o *fakeOutputs) Close() error { return nil }

// LogState: the fake's logs have no limit.
func (f *Fake) LogState(ctx context.Context, ref executor.Ref) (executor.LogState, error) {
	return executor.LogState{}, nil
}

// ExpireLogs drops the logs of every attempt of the job.
func (f *Fake) ExpireLogs(ctx context.Context, jobID int64, e executor.LogExpiry) (bool, error) {
	f.init()
	f.mu.Lock()
	defer f.mu.Unlock()
	removed := false
	for ref := range f.logs {
		if ref.JobID == jobID {
			delete(f.logs, ref)
			removed = true
		}
	}
	if removed {
		if f.expired == nil {
			f.expired = map[int64]executor.LogExpiry{}
		}
		f.expired[jobID] = e
	}
	return removed, nil
}

// LogsExpired reports an ExpireLogs that removed the job's logs.
func (f *Fake) LogsExpired(ctx context.Context, jobID int64) (executor.LogExpiry, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.expired[jobID]
	return e, ok
}

func (o *fakeOutputs) Digest(ctx context.Context, name string) (executor.Checkpoint, error) {
	return executor.Checkpoint{}, fmt.Errorf("digest: not implemented yet")
}
