package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"trainyard/internal/artifacts"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/logs"
)

// The read side of the contract (Logs, Outputs) and Release. Both read
// what the shim and the job wrote, so both go through the guarded
// openers: logs.Copy opens the log's files as logs.OpenFile does (never
// through a link, regular files only, no waiting on a fifo), and the
// outputs are an artifacts.Dir (every path resolved inside it).

// workDirName is the default working directory of an attempt, inside its
// directory (logs.Layout.WorkDir): what Release removes with the rest of
// the workspace. A working directory elsewhere (the spec's workdir) is the
// user's and never removed.
const workDirName = "work"

// locate returns what the executor knows of ref: the attempt it watches
// (nil when none) and the attempt's directory and log, from its launch or
// else from Config.Runs.
func (e *Executor) locate(ref executor.Ref) (a *attempt, dir, logPath string, err error) {
	e.mu.Lock()
	a = e.attempts[ref]
	e.mu.Unlock()
	if a != nil {
		return a, a.dir, a.logPath, nil
	}
	if e.cfg.Runs != "" {
		l := logs.Layout{Root: e.cfg.Runs}
		return nil, l.AttemptDir(ref.JobID, ref.Attempt), l.LogPath(ref.JobID, ref.Attempt), nil
	}
	return nil, "", "", fmt.Errorf("attempt %s: this executor has not launched it and has no runs directory to look in (Config.Runs): %w (%w)", ref, fs.ErrNotExist, domain.ErrNotFound)
}

// ended reports whether the attempt in dir has ended: its outcome is
// recorded, or the watching executor reported it (Exited or Lost). An
// attempt nobody here watches has also ended when its shim is gone
// without an outcome (it is lost).
func ended(a *attempt, dir string) bool {
	if a != nil && a.isDone() || exists(filepath.Join(dir, exitFile)) {
		return true
	}
	if a != nil {
		return false // its watcher reports Lost, once it has ended what was left
	}
	id, err := readProcID(filepath.Join(dir, shimPIDFile))
	return err == nil && !id.alive() && !exists(filepath.Join(dir, exitFile))
}

// Logs writes the attempt's log per q (see executor.Files): a thin wrapper
// over logs.Copy, which pushes down Tail, Since and Grep. Following ends
// once the attempt has ended (ended): the shim has written its outcome
// record, after the last line of the log.
//
// Stream is filtered here, on whole records: with Tail as well, the whole
// log (or all of it since Since) is read to find the last Tail lines of
// the stream.
func (e *Executor) Logs(ctx context.Context, ref executor.Ref, q executor.LogQuery, w io.Writer) error {
	a, dir, logPath, err := e.locate(ref)
	if err != nil {
		return fmt.Errorf("logs: %w", err)
	}
	opts := logs.Options{
		Tail: q.Tail, Follow: q.Follow, Timestamps: q.Timestamps, Grep: q.Grep, Since: q.Since,
		Flush: q.Flush, Poll: e.cfg.PollInterval,
		Done: func() bool { return ended(a, dir) },
	}
	if q.Stream == "" {
		return logs.Copy(ctx, w, logPath, opts)
	}
	sf := &streamFilter{w: w, stream: []byte(q.Stream), timestamps: q.Timestamps}
	opts.Timestamps = true // the stream of each line is needed
	if q.Tail > 0 {
		opts.Tail = 0
		sf.tail, sf.holding = q.Tail, true
		// When following, the first batch is the log so far: its tail
		// is written at its end, and later lines as they come.
		opts.Flush = func() {
			sf.release()
			if q.Flush != nil {
				q.Flush()
			}
		}
	}
	err = logs.Copy(ctx, sf, logPath, opts)
	if err == nil {
		err = sf.finish()
	}
	if err == nil && sf.err != nil {
		err = sf.err
	}
	return err
}

// streamFilter is a writer of whole log records that keeps those of one
// stream (and the markers of dropped lines), as records or text, and, with
// a tail, holds the last tail of them until release.
type streamFilter struct {
	w          io.Writer
	stream     []byte
	timestamps bool
	tail       int
	holding    bool
	held       [][]byte
	partial    []byte
	err        error // the first error of w
}

func (s *streamFilter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		nl := bytes.IndexByte(p, '\n')
		if nl < 0 {
			s.partial = append(s.partial, p...)
			break
		}
		line := p[:nl+1]
		if len(s.partial) > 0 {
			s.partial = append(s.partial, line...)
			line = s.partial
		}
		p = p[nl+1:]
		if err := s.line(line); err != nil {
			return 0, err
		}
		s.partial = s.partial[:0]
	}
	return n, nil
}

// line handles one record (with its newline).
func (s *streamFilter) line(rec []byte) error {
	body := bytes.TrimSuffix(rec, []byte("\n"))
	var stream, text []byte
	if n := len(logs.TimeFormat); len(body) > n && body[n] == ' ' {
		stream, text, _ = bytes.Cut(body[n+1:], []byte(" "))
	}
	marker := string(stream) == logs.System && bytes.HasPrefix(text, []byte(logs.MarkerPrefix))
	if !bytes.Equal(stream, s.stream) && !marker {
		return nil
	}
	out := rec
	if !s.timestamps {
		out = append(append(make([]byte, 0, len(text)+1), text...), '\n')
	}
	if s.holding {
		if len(s.held) == s.tail {
			s.held = append(s.held[:0], s.held[1:]...)
		}
		s.held = append(s.held, bytes.Clone(out))
		return nil
	}
	return s.write(out)
}

func (s *streamFilter) write(b []byte) error {
	if s.err != nil {
		return s.err
	}
	_, s.err = s.w.Write(b)
	return s.err
}

// release writes the held lines and stops holding.
func (s *streamFilter) release() {
	if !s.holding {
		return
	}
	s.holding = false
	for _, b := range s.held {
		if s.write(b) != nil {
			break
		}
	}
	s.held = nil
}

// finish handles an unterminated last record and writes what is held.
func (s *streamFilter) finish() error {
	if len(s.partial) > 0 {
		if err := s.line(append(s.partial, '\n')); err != nil {
			return err
		}
		s.partial = nil
	}
	s.release()
	return s.err
}

// Outputs opens the job's output directory dir as an artifacts.Dir.
func (e *Executor) Outputs(ctx context.Context, dir string) (executor.Outputs, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("outputs: %q is not an absolute path", dir)
	}
	d, err := artifacts.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("outputs: %w", err)
	}
	return &outputs{d: d}, nil
}

// CreateOutputs makes the job's output directory dir and its missing
// parents (the server's own directories: the artifacts root, the
// project's and the job name's), then opens it as Outputs does.
func (e *Executor) CreateOutputs(ctx context.Context, dir string) (executor.Outputs, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("outputs: %q is not an absolute path", dir)
	}
	if err := makeDir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("outputs: %w", err)
	}
	return e.Outputs(ctx, dir)
}

// outputs adapts an artifacts.Dir to executor.Outputs.
type outputs struct {
	d *artifacts.Dir
}

// below checks that rel names a path below the outputs.
func below(rel string) (string, error) {
	c := path.Clean(rel)
	if rel == "" || path.IsAbs(c) || c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("%q is not a path below the outputs", rel)
	}
	return c, nil
}

// notRegular makes an artifacts.ErrNotRegular error match
// executor.ErrNotRegular too.
func notRegular(err error) error {
	if errors.Is(err, artifacts.ErrNotRegular) && !errors.Is(err, executor.ErrNotRegular) {
		return fmt.Errorf("%w (%w)", err, executor.ErrNotRegular)
	}
	return err
}

func (o *outputs) Manifest(ctx context.Context, skip ...string) ([]domain.ArtifactFile, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return o.d.Manifest(skip...)
}

func (o *outputs) Checkpoints(ctx context.Context) ([]executor.Checkpoint, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	found, err := o.d.Checkpoints()
	if err != nil {
		return nil, err
	}
	out := make([]executor.Checkpoint, 0, len(found))
	for _, f := range found {
		out = append(out, checkpoint(f))
	}
	return out, nil
}

// checkpoint maps an artifacts.Found to an executor.Checkpoint.
func checkpoint(f artifacts.Found) executor.Checkpoint {
	return executor.Checkpoint{Name: f.Name, Location: f.Path, Complete: f.Complete, Why: f.Why,
		Size: f.Size, Files: f.Files, ModTime: f.ModTime, SHA256: f.SHA256}
}

func (o *outputs) Open(ctx context.Context, rel string) (executor.OutputFile, error) {
	if err := ctx.Err(); err != nil {
		return executor.OutputFile{}, err
	}
	name, err := below(rel)
	if err != nil {
		return executor.OutputFile{}, err
	}
	f, fi, err := o.d.Open(name)
	if err != nil {
		return executor.OutputFile{}, notRegular(err)
	}
	return executor.OutputFile{ReadSeekCloser: f, Path: name, Size: fi.Size(), ModTime: fi.ModTime()}, nil
}

// walked is a file the walk closes itself.
type walked struct{ *os.File }

func (walked) Close() error { return nil }

func (o *outputs) Walk(ctx context.Context, rel string, fn func(executor.OutputFile) error) error {
	name, err := below(rel)
	if err != nil {
		return err
	}
	return notRegular(o.d.Files(name, func(p string, f *os.File, fi fs.FileInfo) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return fn(executor.OutputFile{ReadSeekCloser: walked{f}, Path: p, Size: fi.Size(), ModTime: fi.ModTime()})
	}))
}

func (o *outputs) MarkComplete(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return o.d.MarkComplete(name) // it checks the name (domain.IsCheckpointName)
}

func (o *outputs) Digest(ctx context.Context, name string) (executor.Checkpoint, error) {
	if err := ctx.Err(); err != nil {
		return executor.Checkpoint{}, err
	}
	f, err := o.d.Digest(name) // it checks the name
	if err != nil {
		if errors.Is(err, artifacts.ErrIncomplete) && !errors.Is(err, executor.ErrIncomplete) {
			err = fmt.Errorf("%w (%w)", err, executor.ErrIncomplete)
		}
		return executor.Checkpoint{}, notRegular(err)
	}
	return checkpoint(f), nil
}

func (o *outputs) MakeReadOnly(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return o.d.MakeReadOnly()
}

func (o *outputs) Remove(ctx context.Context, rel string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	name, err := below(rel)
	if err != nil {
		return err
	}
	return o.d.RemoveAll(name)
}

func (o *outputs) CreateFile(ctx context.Context, rel string) (io.WriteCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	name, err := below(rel)
	if err != nil {
		return nil, err
	}
	f, err := o.d.CreateFile(name)
	if err != nil {
		return nil, notDir(err)
	}
	return f, nil
}

// notDir makes an error matching syscall.ENOTDIR (artifacts.KindError:
// a link or a file where a directory must be) match executor.ErrNotDir
// too; an artifacts.KindError (in CreateFile and Replace) says only what
// is wrong where, with the path relative to the outputs.
func notDir(err error) error {
	var k *artifacts.KindError
	switch {
	case errors.As(err, &k) && errors.Is(k, syscall.ENOTDIR):
		return kindError{k, executor.ErrNotDir}
	case errors.As(err, &k):
		return kindError{k, executor.ErrNotRegular}
	case errors.Is(err, syscall.ENOTDIR) && !errors.Is(err, executor.ErrNotDir):
		return fmt.Errorf("%w (%w)", err, executor.ErrNotDir)
	}
	return err
}

// kindError is an artifacts.KindError that matches an executor error too.
type kindError struct {
	*artifacts.KindError
	also error
}

func (e kindError) Is(target error) bool { return target == e.also }
func (e kindError) Unwrap() error        { return e.KindError }

func (o *outputs) Replace(ctx context.Context, from, to string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f, err := below(from)
	if err != nil {
		return err
	}
	t, err := below(to)
	if err != nil {
		return err
	}
	return notRegular(notDir(o.d.Replace(f, t)))
}

func (o *outputs) Rename(ctx context.Context, from, to string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f, err := below(from)
	if err != nil {
		return err
	}
	t, err := below(to)
	if err != nil {
		return err
	}
	return o.d.Rename(f, t)
}

func (o *outputs) Close() error { return o.d.Close() }

// releaseWait bounds how long Release waits for a shim that has recorded
// the outcome to finish exiting.
const releaseWait = 10 * time.Second

// Release removes what is left of an ended attempt besides its log, its
// outcome record (exit.json), its metric log (metrics.jsonl) and the
// shim's own diagnostics (shim.log, named in Lost messages): its cgroups,
// if the shim could not remove them; its HOME and tmp, unless empty
// (emptyDirIn); the copy of the job's code package unpacked for it
// (Launch.Code), when inside its directory; and the shim's state files
// (stop, procs, code_dir, and the cgroup.json and master_port of
// attempts of earlier versions). The claim (shim.pid) stays, so that no
// shim started late can run the attempt again, and so does child.pid. A
// working directory without a package stays: it holds what the job wrote
// there. Everything is removed through an os.Root at the attempt's
// directory, so no link the job left is followed.
//
// An attempt this executor does not watch, whose shim died without an
// outcome, has its processes ended first, as before a Lost report. An
// attempt not found (no directory) is no error; one this executor has not
// launched, without Config.Runs, is an error matching domain.ErrNotFound.
func (e *Executor) Release(ctx context.Context, ref executor.Ref) error {
	a, dir, _, err := e.locate(ref)
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if !ended(a, dir) {
		_, err := readProcID(filepath.Join(dir, shimPIDFile))
		if a != nil || !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("release %s: the attempt has not ended; stop it, and release it once its end is recorded: %w", ref, domain.ErrConflict)
		}
		// No shim ever claimed it and nobody here launches it: it never ran.
	} else if a == nil && !exists(filepath.Join(dir, exitFile)) {
		if err := reapAttempt(dir); err != nil {
			return fmt.Errorf("release %s: end what is left of the lost attempt: %w", ref, err)
		}
	}
	// One read of the claim and one listing of the directory: only what
	// is there is removed.
	c, cerr := readClaim(dir)
	if err := waitShimGone(ctx, c, cerr); err != nil {
		return fmt.Errorf("release %s: %w", ref, err)
	}
	if err := removeCgroups(c, cerr); err != nil {
		return fmt.Errorf("release %s: %w", ref, err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("release %s: %w", ref, err)
	}
	defer root.Close()
	names, err := readDirNames(root)
	if err != nil {
		return fmt.Errorf("release %s: %w", ref, err)
	}
	present := make(map[string]bool, len(names))
	for _, n := range names {
		present[n] = true
	}
	var errs []error
	var trees []string
	for _, name := range []string{homeDir, tmpDir} {
		if present[name] && !emptyDirIn(root, name) {
			trees = append(trees, name)
		}
	}
	if present[codeDirFile] {
		if b, err := root.ReadFile(codeDirFile); err == nil {
			// An unpacked code package (of this attempt's own): it may be
			// gigabytes. A working directory without one holds only what
			// the job wrote there, and stays.
			if rel, err := filepath.Rel(dir, string(b)); err == nil && filepath.IsLocal(rel) {
				trees = append(trees, rel)
			}
		}
	}
	for _, name := range trees {
		if err := removeTree(root, name); err != nil {
			errs = append(errs, err)
		}
	}
	// The claim stays: it keeps a shim started late off the attempt (claim).
	// So does child.pid, read only while the attempt runs: see emptyDirIn.
	state := []string{stopFile, procsFile, legacyPortFile, legacyCgroupFile, codeDirFile}
	temps := append(slices.Clone(state), exitFile) // written atomically
	for _, n := range names {
		// The state files, and temporary files of interrupted atomic
		// writes (writeFileAtomic).
		remove := slices.Contains(state, n)
		for _, s := range temps {
			remove = remove || strings.HasPrefix(n, "."+s+".")
		}
		if remove {
			if err := root.Remove(n); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("release %s: %w", ref, err)
	}
	return nil
}

// emptyDirIn reports whether name in root is a directory, not a link,
// that holds nothing. Release keeps such a HOME or tmp, as most are, and
// the attempt's child.pid: on ext4 without a journal every inode freed
// in the last few seconds is skipped, one by one, by each inode the
// machine allocates next, so freeing three per attempt made starting
// attempts cost in proportion to how many had just ended. What a job
// left in them is removed.
func emptyDirIn(root *os.Root, name string) bool {
	if st, err := root.Lstat(name); err != nil || !st.IsDir() {
		return false
	}
	f, err := root.Open(name)
	if err != nil {
		return false
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	return len(names) == 0 && errors.Is(err, io.EOF)
}

// readDirNames lists the names in root's directory.
func readDirNames(root *os.Root) ([]string, error) {
	f, err := root.Open(".")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// waitShimGone waits for the attempt's shim, if it still runs, to exit:
// after recording the outcome it still removes its cgroups and exits. A
// shared supervisor (which runs on) has nothing of the attempt left to do
// once it recorded the outcome.
// c is the attempt's claim, err the error reading it.
func waitShimGone(ctx context.Context, c claimRecord, err error) error {
	if err != nil || c.Shared {
		return nil
	}
	id := c.Shim
	deadline := time.Now().Add(releaseWait)
	for id.alive() {
		if time.Now().After(deadline) {
			return fmt.Errorf("its supervisor (pid %d) still runs %s after recording the outcome", id.PID, releaseWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// removeCgroups kills and removes the attempt's cgroups, when its claim
// names some: the shim removes them as it exits, but may have failed
// to. c is the attempt's claim, err the error reading it.
func removeCgroups(c claimRecord, err error) error {
	if errors.Is(err, fs.ErrNotExist) || err == nil && c.Cgroups == nil {
		return nil
	}
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(c.Cgroups.Dirs(), func(d string) bool {
		_, err := os.Lstat(d)
		return !errors.Is(err, fs.ErrNotExist)
	}) {
		return nil // removed, as the supervisor does: a group that holds a process cannot be
	}
	if err := c.Cgroups.Kill(time.Second); err != nil {
		return err
	}
	return c.Cgroups.Remove(time.Second)
}

// removeTree removes name below root and everything in it. Directories the
// job made unwritable are made writable first (through root, directories
// only: a link is removed, never followed).
func removeTree(root *os.Root, name string) error {
	err := root.RemoveAll(name)
	if err == nil || !errors.Is(err, fs.ErrPermission) {
		return err
	}
	_ = fs.WalkDir(root.FS(), name, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = root.Chmod(p, 0o700)
		}
		return nil
	})
	return root.RemoveAll(name)
}

// NewReader returns the local executor's read side alone, for a server
// that serves logs and outputs but runs no attempts (an API replica, a
// test): attempts are found in the runs directory as laid out by
// logs.Layout, and an attempt has ended once its outcome is recorded or
// its supervisor is gone.
func NewReader(runs string) executor.Files {
	return &Executor{
		cfg:      Config{Runs: runs, PollInterval: 100 * time.Millisecond},
		log:      slog.New(slog.DiscardHandler),
		attempts: map[executor.Ref]*attempt{},
	}
}

// runs is the layout of the attempt directories (Config.Runs).
func (e *Executor) runs() (logs.Layout, error) {
	if e.cfg.Runs == "" {
		return logs.Layout{}, errors.New("this executor has no runs directory (Config.Runs)")
	}
	return logs.Layout{Root: e.cfg.Runs}, nil
}

// LogState reads the attempt's log limit record (logs.Layout.LogLimited).
func (e *Executor) LogState(ctx context.Context, ref executor.Ref) (executor.LogState, error) {
	l, err := e.runs()
	if err != nil {
		return executor.LogState{}, fmt.Errorf("log state of %s: %w", ref, err)
	}
	limit, dropped, ok := l.LogLimited(ref.JobID, ref.Attempt)
	return executor.LogState{Limited: ok, Limit: limit, Dropped: dropped}, nil
}

// ExpireLogs removes the job's attempt logs (logs.Layout.Expire), through
// an os.Root at the runs directory.
func (e *Executor) ExpireLogs(ctx context.Context, jobID int64, x executor.LogExpiry) (bool, error) {
	l, err := e.runs()
	if err != nil {
		return false, fmt.Errorf("expire the logs of job %d: %w", jobID, err)
	}
	return l.Expire(jobID, logs.Expiry{DeletedAt: x.DeletedAt, Retention: x.Retention})
}

// LogsExpired reads the job's expiry record (logs.Layout.Expired).
func (e *Executor) LogsExpired(ctx context.Context, jobID int64) (executor.LogExpiry, bool) {
	l, err := e.runs()
	if err != nil {
		return executor.LogExpiry{}, false
	}
	x, ok := l.Expired(jobID)
	return executor.LogExpiry{DeletedAt: x.DeletedAt, Retention: x.Retention}, ok
}
