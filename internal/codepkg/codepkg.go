// Package codepkg builds and unpacks code packages: deterministic, content-
// addressed tar.gz archives of a source tree that a job runs from.
//
// Build walks a directory, leaves out what .gitignore files (at any depth),
// .git/info/exclude and .trainyardignore files exclude, and writes the rest
// as a tar.gz whose bytes depend only on the files' paths, contents and
// executable bits: paths are sorted, times are zero, owners are empty and
// modes are 0644 or 0755. The same tree therefore always hashes to the same
// "sha256:<hex>", whoever builds it and whenever, with the same version of
// this package (a newer compressor may produce other bytes; that only costs
// one more upload).
//
// Symbolic links are kept as links when their target is relative and stays
// inside the tree; a link that is absolute or points outside the tree fails
// the build with its name (exclude it, or replace it with the file). Empty
// directories, sockets and other special files are not packaged.
//
// Unpack extracts such an archive, refusing anything that could write or
// point outside its destination.
//
// The package uses the standard library only and runs `git` (when present)
// to record the commit and whether the tree differs from it.
package codepkg

import (
	"archive/tar"
	"cmp"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// DefaultMaxSize is the default limit of a package's compressed size.
const DefaultMaxSize = 100 << 20

// ignoreFileName is the Trainyard-specific ignore file.
const ignoreFileName = ".trainyardignore"

// HashPrefix starts every package hash.
const HashPrefix = "sha256:"

// ErrTooLarge reports a package over its size limit; errors of type
// *TooLargeError match it.
var ErrTooLarge = errors.New("code package too large")

// Options tunes Build.
type Options struct {
	// MaxSize is the largest compressed size allowed, in bytes; 0 means
	// DefaultMaxSize and a negative value means no limit.
	MaxSize int64
	// TempDir is where the archive is written ("" : os.TempDir()).
	TempDir string
	// NoGit skips recording the git commit and dirty state.
	NoGit bool
}

// Package is a built code package.
type Package struct {
	// Path is the archive file; the caller removes it (see Remove).
	Path string
	// SHA256 is "sha256:<hex>" of the archive's bytes.
	SHA256 string
	// Size is the archive's (compressed) size in bytes.
	Size int64
	// Files is the number of files and links packaged.
	Files int
	// Bytes is the total uncompressed size of the packaged files.
	Bytes int64
	// Commit is the git commit the tree is checked out at; "" outside a git
	// work tree (or before its first commit).
	Commit string
	// Dirty reports that the tree differs from Commit: modified, staged,
	// deleted or untracked files that git does not ignore.
	Dirty bool
}

// Remove deletes the archive file.
func (p Package) Remove() error {
	if p.Path == "" {
		return nil
	}
	return os.Remove(p.Path)
}

// entry is one file or link to package.
type entry struct {
	rel    string // slash-separated path in the archive
	abs    string
	size   int64
	exec   bool
	link   string // symlink target; "" for regular files
	isLink bool
}

// TooLargeError reports a package whose compressed size passed the limit. It
// names the largest files so the user knows what to exclude.
type TooLargeError struct {
	Dir     string
	Limit   int64
	Largest []FileSize // biggest first, at most 5
}

// FileSize is a packaged file and its uncompressed size.
type FileSize struct {
	Path string
	Size int64
}

func (e *TooLargeError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "code package of %s is over the %s limit (compressed)", e.Dir, FormatBytes(e.Limit))
	if len(e.Largest) > 0 {
		b.WriteString("; largest files:")
		for _, f := range e.Largest {
			fmt.Fprintf(&b, " %s (%s),", f.Path, FormatBytes(f.Size))
		}
		s := strings.TrimSuffix(b.String(), ",")
		b.Reset()
		b.WriteString(s)
	}
	fmt.Fprintf(&b, "; list what the job does not need (data, checkpoints, virtualenvs) in %s",
		filepath.Join(e.Dir, ignoreFileName))
	b.WriteString(" (same syntax as .gitignore)")
	return b.String()
}

// Is makes a *TooLargeError match ErrTooLarge.
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// Build packages the tree at dir into a temporary tar.gz file and returns
// it with its hash, sizes and git state. The caller must Remove it.
func Build(dir string, opts Options) (Package, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Package{}, fmt.Errorf("code package: resolve %s: %w", dir, err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return Package{}, fmt.Errorf("code package: %w; --context must name an existing directory", err)
	}
	if !st.IsDir() {
		return Package{}, fmt.Errorf("code package: %s is not a directory; --context must name the directory holding the job's code", dir)
	}
	entries, err := collect(abs)
	if err != nil {
		return Package{}, err
	}
	f, err := os.CreateTemp(opts.TempDir, "trainyard-code-*.tar.gz")
	if err != nil {
		return Package{}, fmt.Errorf("code package: create temporary archive: %w", err)
	}
	pkg, err := write(f, abs, entries, opts)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("code package: write %s: %w", f.Name(), cerr)
	}
	if err != nil {
		os.Remove(f.Name())
		return Package{}, err
	}
	pkg.Path = f.Name()
	if !opts.NoGit {
		pkg.Commit, pkg.Dirty, err = gitState(abs)
		if err != nil {
			os.Remove(f.Name())
			return Package{}, err
		}
	}
	return pkg, nil
}

// Write packages the tree at dir into w, like Build but without a file and
// without git state.
func Write(w io.Writer, dir string, opts Options) (Package, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Package{}, fmt.Errorf("code package: resolve %s: %w", dir, err)
	}
	entries, err := collect(abs)
	if err != nil {
		return Package{}, err
	}
	return write(w, abs, entries, opts)
}

// limitWriter counts bytes and fails once more than max pass (max < 0: no
// limit).
type limitWriter struct {
	w   io.Writer
	n   int64
	max int64
}

var errLimit = errors.New("limit reached")

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.max >= 0 && l.n+int64(len(p)) > l.max {
		return 0, errLimit
	}
	n, err := l.w.Write(p)
	l.n += int64(n)
	return n, err
}

// write streams the archive of entries to w.
func write(w io.Writer, root string, entries []entry, opts Options) (Package, error) {
	limit := opts.MaxSize
	if limit == 0 {
		limit = DefaultMaxSize
	}
	h := sha256.New()
	lw := &limitWriter{w: io.MultiWriter(w, h), max: limit}
	zw, err := gzip.NewWriterLevel(lw, gzip.DefaultCompression)
	if err != nil {
		return Package{}, err
	}
	// The gzip header carries no name and no time; OS stays "unknown".
	tw := tar.NewWriter(zw)
	var total int64
	tooLarge := func() error {
		return &TooLargeError{Dir: root, Limit: limit, Largest: largest(entries, 5)}
	}
	check := func(err error, what string) error {
		if errors.Is(err, errLimit) {
			return tooLarge()
		}
		return fmt.Errorf("code package: %s: %w", what, err)
	}
	epoch := time.Unix(0, 0).UTC()
	for _, e := range entries {
		hdr := &tar.Header{Name: e.rel, ModTime: epoch, Format: tar.FormatPAX}
		switch {
		case e.isLink:
			hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, e.link, 0o777
		default:
			hdr.Typeflag, hdr.Size, hdr.Mode = tar.TypeReg, e.size, 0o644
			if e.exec {
				hdr.Mode = 0o755
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return Package{}, check(err, "write header of "+e.rel)
		}
		if e.isLink {
			continue
		}
		if err := copyFile(tw, e); err != nil {
			return Package{}, check(err, "add "+e.rel)
		}
		total += e.size
	}
	if err := tw.Close(); err != nil {
		return Package{}, check(err, "finish tar")
	}
	if err := zw.Close(); err != nil {
		return Package{}, check(err, "finish gzip")
	}
	return Package{SHA256: HashPrefix + hex.EncodeToString(h.Sum(nil)), Size: lw.n, Files: len(entries), Bytes: total}, nil
}

// copyFile writes exactly e.size bytes of the file; a file that changed size
// since the walk fails the build rather than producing a broken archive.
func copyFile(w io.Writer, e entry) error {
	f, err := os.Open(e.abs)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.Copy(w, io.LimitReader(f, e.size))
	if err != nil {
		return err
	}
	if n != e.size {
		return fmt.Errorf("the file shrank from %d to %d bytes while it was packaged; build again", e.size, n)
	}
	return nil
}

// largest returns the n biggest regular files, biggest first.
func largest(entries []entry, n int) []FileSize {
	var out []FileSize
	for _, e := range entries {
		if !e.isLink {
			out = append(out, FileSize{Path: e.rel, Size: e.size})
		}
	}
	slices.SortStableFunc(out, func(a, b FileSize) int { return cmp.Compare(b.Size, a.Size) })
	return out[:min(n, len(out))]
}

// collect walks root and returns what to package, sorted by path.
func collect(root string) ([]entry, error) {
	ig := &ignorer{}
	if data, err := os.ReadFile(filepath.Join(root, ".git", "info", "exclude")); err == nil {
		if ps := parseIgnore(data); len(ps) > 0 {
			ig.git = []ignoreFile{{patterns: ps}}
		}
	}
	var out []entry
	var walk func(abs, rel string, ig *ignorer) error
	walk = func(abs, rel string, ig *ignorer) error {
		ig, err := ig.enter(abs, rel)
		if err != nil {
			return fmt.Errorf("code package: read ignore file in %s: %w", abs, err)
		}
		ents, err := os.ReadDir(abs)
		if err != nil {
			return fmt.Errorf("code package: %w", err)
		}
		for _, d := range ents {
			name := d.Name()
			if name == ".git" {
				continue
			}
			r := name
			if rel != "" {
				r = rel + "/" + name
			}
			a := filepath.Join(abs, name)
			typ := d.Type()
			if ig.ignored(r, typ.IsDir()) {
				continue
			}
			switch {
			case typ.IsDir():
				if err := walk(a, r, ig); err != nil {
					return err
				}
			case typ.IsRegular():
				info, err := d.Info()
				if err != nil {
					return fmt.Errorf("code package: %w", err)
				}
				out = append(out, entry{rel: r, abs: a, size: info.Size(), exec: info.Mode()&0o111 != 0})
			case typ&fs.ModeSymlink != 0:
				target, err := os.Readlink(a)
				if err != nil {
					return fmt.Errorf("code package: %w", err)
				}
				if !linkInside(r, target) {
					return fmt.Errorf("code package: symbolic link %s points to %s, outside %s; "+
						"packages keep only links that stay inside the tree: replace it with the file it points to, "+
						"or exclude it in %s", r, target, root, filepath.Join(root, ignoreFileName))
				}
				out = append(out, entry{rel: r, abs: a, isLink: true, link: target})
			default:
				// sockets, pipes, devices: not code
			}
		}
		return nil
	}
	if err := walk(root, "", ig); err != nil {
		return nil, err
	}
	links := map[string]string{}
	for _, e := range out {
		if e.isLink {
			links[e.rel] = e.link
		}
	}
	if err := checkLinks(links); err != nil {
		return nil, fmt.Errorf("code package: %w; replace the link with what it points to, or exclude it in %s",
			err, filepath.Join(root, ignoreFileName))
	}
	slices.SortFunc(out, func(a, b entry) int { return strings.Compare(a.rel, b.rel) })
	return out, nil
}

// linkInside reports whether a symlink at rel (slash-separated, relative to
// the tree root) with the given target stays inside the tree.
func linkInside(rel, target string) bool {
	if target == "" || path.IsAbs(target) || filepath.IsAbs(target) || strings.Contains(target, `\`) {
		return false
	}
	p := path.Join(path.Dir(rel), target)
	return p != ".." && !strings.HasPrefix(p, "../")
}

// gitState returns the commit HEAD names and whether the tree at dir differs
// from it, with at most two runs of git. Outside a git work tree, or without
// git installed, it returns "", false and no error.
func gitState(dir string) (commit string, dirty bool, err error) {
	git, lerr := exec.LookPath("git")
	if lerr != nil {
		return "", false, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := func(args ...string) (string, string, error) {
		cmd := exec.CommandContext(ctx, git, append([]string{"-C", dir}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_OPTIONAL_LOCKS=0", "LC_ALL=C")
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}
	out, stderr, err := run("rev-parse", "HEAD")
	if err != nil {
		if strings.Contains(stderr, "not a git repository") {
			return "", false, nil
		}
		// A repository without commits: HEAD names nothing yet, but the
		// work tree may still be dirty.
		if !strings.Contains(stderr, "unknown revision") && !strings.Contains(stderr, "ambiguous argument 'HEAD'") {
			return "", false, fmt.Errorf("code package: git rev-parse HEAD in %s: %v: %s", dir, err, strings.TrimSpace(stderr))
		}
	} else {
		commit = strings.TrimSpace(out)
	}
	// "-- ." limits the check to the packaged directory.
	out, stderr, err = run("status", "--porcelain", "--untracked-files=normal", "--", ".")
	if err != nil {
		return "", false, fmt.Errorf("code package: git status in %s: %v: %s", dir, err, strings.TrimSpace(stderr))
	}
	return commit, strings.TrimSpace(out) != "", nil
}

// FormatBytes renders n as "12.3 MiB", "512 B" and so on.
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
