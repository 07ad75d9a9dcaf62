package executortest

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path"
	"regexp"
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

// hfCheckpoint matches the names of Hugging Face Trainer checkpoint
// directories.
var hfCheckpoint = regexp.MustCompile(`^checkpoint-[0-9]+$`)

// wholeZip reports whether data is one whole zip archive (its central
// directory reads), and whether it starts as one does.
func wholeZip(data []byte) (whole, looksZip bool) {
	if _, err := zip.NewReader(bytes.NewReader(data), int64(len(data))); err == nil || errors.Is(err, zip.ErrInsecurePath) {
		return true, true
	}
	return false, bytes.HasPrefix(data, []byte("PK\x03\x04"))
}

// judge returns the checkpoint name below the checkpoint directory root
// by the rules of domain.CheckpointMarker, with the names of its regular
// files in lexical order; ok is false when there is none to list (gone, a
// link). f.mu is held.
func (o *fakeOutputs) judge(root, name string) (c executor.Checkpoint, files []string, ok bool) {
	abs := path.Join(root, name)
	c = executor.Checkpoint{Name: name, Location: abs}
	marker := domain.CheckpointMarker
	if ff := o.f.files[abs]; ff != nil {
		if ff.link != "" {
			return c, nil, false
		}
		c.Size, c.Files, c.ModTime = int64(len(ff.data)), 1, ff.modTime
		m := o.f.files[abs+marker]
		whole, looksZip := wholeZip(ff.data)
		base := name + marker
		switch {
		case m != nil && m.link == "":
			c.Complete, c.ModTime = true, m.modTime
		case whole:
			c.Complete = true
		case m != nil:
			c.Why = fmt.Sprintf("%s is a symbolic link, not a regular file: remove it, then write %s after the file", base, base)
		case looksZip:
			c.Why = fmt.Sprintf("not a whole zip archive (a save cut short?) and no marker: write %s after the file, or save it with trainyard.save_checkpoint", base)
		default:
			c.Why = fmt.Sprintf("no marker: write %s after the file, or save it with trainyard.save_checkpoint", base)
		}
		return c, []string{abs}, true
	}
	below := o.entries(abs)
	if len(below) == 0 {
		return c, nil, false
	}
	for n, ff := range below {
		if ff.link != "" {
			continue
		}
		files = append(files, n)
		c.Size += int64(len(ff.data))
		c.Files++
		if ff.modTime.After(c.ModTime) {
			c.ModTime = ff.modTime
		}
	}
	slices.Sort(files)
	hf := hfCheckpoint.MatchString(name)
	m, state := o.f.files[abs+"/"+marker], o.f.files[abs+"/"+domain.HFTrainerState]
	switch {
	case m != nil && m.link == "":
		c.Complete, c.ModTime = true, m.modTime
	case hf && state != nil && state.link == "":
		c.Complete, c.ModTime = true, state.modTime
	case m != nil:
		c.Why = fmt.Sprintf("%s inside is a symbolic link, not a regular file: remove it, then write it after the data, or call checkpoint_done", marker)
	case hf && state != nil:
		c.Why = fmt.Sprintf("%s inside is a symbolic link, not a regular file, and there is no %s marker: write %s after the data, or call checkpoint_done", domain.HFTrainerState, marker, marker)
	case hf:
		c.Why = fmt.Sprintf("no %s inside (the Trainer writes it last), nor a %s marker: write %s after the data, or call checkpoint_done", domain.HFTrainerState, marker, marker)
	default:
		c.Why = fmt.Sprintf("no %s marker inside: write it after the data, or call checkpoint_done", marker)
	}
	return c, files, true
}

func (o *fakeOutputs) Checkpoints(ctx context.Context) ([]executor.Checkpoint, error) {
	o.f.mu.Lock()
	defer o.f.mu.Unlock()
	root := path.Join(o.dir, executor.CheckpointsDir)
	if o.f.files[root] != nil { // a file or a link in place of the directory
		return nil, nil
	}
	names := map[string]bool{}
	for n := range o.entries(root) {
		if rest, ok := strings.CutPrefix(n, root+"/"); ok {
			name, _, _ := strings.Cut(rest, "/")
			names[name] = true
		}
	}
	var out []executor.Checkpoint
	for name := range names {
		if !domain.IsCheckpointName(name) {
			continue
		}
		if c, _, ok := o.judge(root, name); ok {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b executor.Checkpoint) int {
		if c := a.ModTime.Compare(b.ModTime); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, nil
}

func (o *fakeOutputs) Digest(ctx context.Context, name string) (executor.Checkpoint, error) {
	if !domain.IsCheckpointName(name) {
		return executor.Checkpoint{}, fmt.Errorf("%q is not a checkpoint name", name)
	}
	o.f.mu.Lock()
	defer o.f.mu.Unlock()
	root := path.Join(o.dir, executor.CheckpointsDir)
	abs := path.Join(root, name)
	c, files, ok := o.judge(root, name)
	switch {
	case !ok && o.f.files[abs] != nil:
		return executor.Checkpoint{}, &fs.PathError{Op: "digest", Path: o.rel(abs), Err: executor.ErrNotRegular}
	case !ok:
		return executor.Checkpoint{}, &fs.PathError{Op: "digest", Path: o.rel(abs), Err: fs.ErrNotExist}
	case !c.Complete:
		return executor.Checkpoint{}, fmt.Errorf("checkpoint %s: %w: %s", name, executor.ErrIncomplete, c.Why)
	}
	if len(files) == 1 && files[0] == abs {
		sum := sha256.Sum256(o.f.files[abs].data)
		c.SHA256 = hex.EncodeToString(sum[:])
		return c, nil
	}
	h := sha256.New()
	for _, n := range files {
		sub := strings.TrimPrefix(n, abs+"/")
		if sub == domain.CheckpointMarker {
			continue
		}
		data := o.f.files[n].data
		sum := sha256.Sum256(data)
		fmt.Fprintf(h, "%s  %d  %s\n", hex.EncodeToString(sum[:]), len(data), sub)
	}
	c.SHA256 = hex.EncodeToString(h.Sum(nil))
	return c, nil
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
	if !domain.IsCheckpointName(name) {
		return fmt.Errorf("%q is not a checkpoint name", name)
	}
	abs := path.Join(o.dir, executor.CheckpointsDir, name)
	o.f.mu.Lock()
	defer o.f.mu.Unlock()
	var marker string
	switch ff := o.f.files[abs]; {
	case ff != nil && ff.link != "":
		return fmt.Errorf("%s is a symbolic link, not a regular file or a directory", abs)
	case ff != nil:
		marker = abs + domain.CheckpointMarker
	case len(o.entries(abs)) > 0:
		marker = path.Join(abs, domain.CheckpointMarker)
	default:
		return fmt.Errorf("mark %s complete: %w", abs, fs.ErrNotExist)
	}
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
