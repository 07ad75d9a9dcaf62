package codepkg

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
)

// Default limits of Unpack. Source trees are megabytes; a package that
// unpacks to more carries data, checkpoints or build output, and a small
// archive of zeros or of empty entries can stand for far more ("zip bomb").
const (
	// DefaultMaxUnpacked bounds the total size of the files unpacked.
	DefaultMaxUnpacked = 2 << 30
	// DefaultMaxFiles bounds the entries (files, directories and links).
	DefaultMaxFiles = 100_000
)

// Limits bounds what Unpack writes. Zero fields take the defaults.
type Limits struct {
	// MaxBytes bounds the total size of the files, in bytes.
	MaxBytes int64
	// MaxFiles bounds the entries: files, directories and links.
	MaxFiles int
}

// withDefaults fills zero fields with the defaults.
func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxUnpacked
	}
	if l.MaxFiles <= 0 {
		l.MaxFiles = DefaultMaxFiles
	}
	return l
}

// ErrUnsafe reports an archive entry that Unpack refuses: a path that is
// absolute or climbs out of the destination, a link pointing outside it, a
// device or other special file, a duplicate, or too much data.
var ErrUnsafe = errors.New("unsafe code package")

func unsafeErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnsafe, fmt.Sprintf(format, args...))
}

// Unpack extracts a tar.gz code package into dest, creating dest if needed
// (dest should be new or empty). Files get mode 0644, or 0755 when any
// executable bit is set; directories 0755.
//
// Every write goes through an os.Root at dest, and entries are checked
// first: absolute paths, ".." components, hard links, devices, FIFOs and
// other special types, symbolic links that are absolute or point outside
// dest, duplicate paths, and more than lim's bytes or entries in all each
// fail with an error matching ErrUnsafe. A file's size is checked against
// what is left before any of it is written. On an error dest may hold part
// of the package; remove it.
func Unpack(r io.Reader, dest string, lim Limits) error {
	lim = lim.withDefaults()
	zr, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("unpack code package: not a gzip stream: %w", err)
	}
	defer zr.Close()
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return fmt.Errorf("unpack code package: %w", err)
	}
	root, err := os.OpenRoot(dest)
	if err != nil {
		return fmt.Errorf("unpack code package: %w", err)
	}
	defer root.Close()
	tr := tar.NewReader(zr)
	seen := map[string]bool{}
	links := map[string]string{} // name → target
	var total int64
	for n := 0; ; n++ {
		hdr, err := tr.Next()
		if err == io.EOF {
			// A link may point through another one: check where each
			// really leads now that all are known.
			return checkLinks(links)
		}
		if err != nil {
			return fmt.Errorf("unpack code package: read archive: %w", err)
		}
		if n >= lim.MaxFiles {
			return unsafeErr("it has more than %d entries (files, directories and links), this server's limit; "+
				"leave data, checkpoints and build output out of the package (list them in .trainyardignore), or have the server's code.max_files raised", lim.MaxFiles)
		}
		name, err := cleanName(hdr.Name)
		if err != nil {
			return err
		}
		if name == "." {
			if hdr.Typeflag == tar.TypeDir {
				continue
			}
			return unsafeErr("entry %q names the destination itself", hdr.Name)
		}
		if seen[name] {
			return unsafeErr("entry %q appears twice", hdr.Name)
		}
		seen[name] = true
		for p := path.Dir(name); p != "."; p = path.Dir(p) {
			if _, ok := links[p]; ok {
				return unsafeErr("entry %s lies under the symbolic link %s", name, p)
			}
		}
		if dir := path.Dir(name); dir != "." {
			if err := root.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("unpack code package: create directory for %s: %w", name, err)
			}
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return fmt.Errorf("unpack code package: create directory %s: %w", name, err)
			}
		case tar.TypeReg:
			if hdr.Size < 0 || hdr.Size > lim.MaxBytes-total {
				return unsafeErr("its files come to more than %s, this server's limit (reached at %s, %s); "+
					"leave data, checkpoints and build output out of the package (list them in .trainyardignore), or have the server's code.max_unpacked raised",
					FormatBytes(lim.MaxBytes), name, FormatBytes(hdr.Size))
			}
			total += hdr.Size
			mode := os.FileMode(0o644)
			if hdr.Mode&0o111 != 0 {
				mode = 0o755
			}
			if err := writeFile(root, name, tr, hdr.Size, mode); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if !linkInside(name, hdr.Linkname) {
				return unsafeErr("symbolic link %s points to %q, outside the package", name, hdr.Linkname)
			}
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return fmt.Errorf("unpack code package: link %s: %w", name, err)
			}
			links[name] = hdr.Linkname
		case tar.TypeXGlobalHeader:
			continue
		default:
			return unsafeErr("entry %s has type %q; only files, directories and links inside the package are allowed", name, string(hdr.Typeflag))
		}
	}
}

// cleanName checks an archive path and returns it cleaned.
func cleanName(name string) (string, error) {
	if name == "" || strings.ContainsRune(name, 0) || strings.Contains(name, `\`) {
		return "", unsafeErr("entry name %q is invalid", name)
	}
	if path.IsAbs(name) {
		return "", unsafeErr("entry %q has an absolute path", name)
	}
	for _, seg := range strings.Split(name, "/") {
		if seg == ".." {
			return "", unsafeErr("entry %q climbs out of the destination", name)
		}
	}
	return path.Clean(name), nil
}

// writeFile creates name (which must not exist) with exactly size bytes.
func writeFile(root *os.Root, name string, r io.Reader, size int64, mode os.FileMode) error {
	// O_EXCL: never write through an existing entry (a link planted
	// earlier); O_NOFOLLOW-like safety comes from the Root.
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("unpack code package: create %s: %w", name, err)
	}
	n, err := io.Copy(f, io.LimitReader(r, size))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("unpack code package: write %s: %w", name, err)
	}
	if n != size {
		return fmt.Errorf("unpack code package: %s is truncated (%d of %d bytes)", name, n, size)
	}
	// The umask may have narrowed the mode; packages are explicit.
	if err := root.Chmod(name, mode); err != nil {
		return fmt.Errorf("unpack code package: chmod %s: %w", name, err)
	}
	return nil
}

// ParseHash checks a package hash "sha256:<64 lowercase hex>" and returns
// its hex part.
func ParseHash(s string) (string, error) {
	hex, ok := strings.CutPrefix(s, HashPrefix)
	if !ok || len(hex) != 64 || strings.Trim(hex, "0123456789abcdef") != "" {
		return "", fmt.Errorf("code package hash %q is not \"sha256:\" followed by 64 lowercase hex digits", s)
	}
	return hex, nil
}

// BlobKey is where the package with hash "sha256:<hex>" is kept in the blob
// store: "code/sha256/<hex>.tar.gz". It panics on an invalid hash; check it
// with ParseHash first.
func BlobKey(hash string) string {
	hex, err := ParseHash(hash)
	if err != nil {
		panic(err)
	}
	return "code/sha256/" + hex + ".tar.gz"
}

// checkLinks follows every link of a package (name → target, names
// slash-separated and relative to the package root, none lying under another
// link) the way the kernel would, through the other links, and fails with
// ErrUnsafe when one leads outside the root or loops.
func checkLinks(links map[string]string) error {
	for _, name := range slices.Sorted(maps.Keys(links)) {
		dir := strings.Split(path.Dir(name), "/")
		if dir[0] == "." {
			dir = nil
		}
		if _, ok := resolveLink(links, dir, links[name], 0); !ok {
			return unsafeErr("symbolic link %s -> %s leads outside the package (or loops)", name, links[name])
		}
	}
	return nil
}

// resolveLink resolves target relative to the directory dir (path parts),
// following links, and returns the parts of the result; ok is false when
// the walk climbs above the root, the target is absolute, or links nest
// deeper than 40.
func resolveLink(links map[string]string, dir []string, target string, depth int) ([]string, bool) {
	if depth > 40 || target == "" || path.IsAbs(target) {
		return nil, false
	}
	cur := slices.Clone(dir)
	for _, c := range strings.Split(target, "/") {
		switch c {
		case "", ".":
		case "..":
			if len(cur) == 0 {
				return nil, false
			}
			cur = cur[:len(cur)-1]
		default:
			cur = append(cur, c)
			if t, ok := links[strings.Join(cur, "/")]; ok {
				res, ok := resolveLink(links, cur[:len(cur)-1], t, depth+1)
				if !ok {
					return nil, false
				}
				cur = res
			}
		}
	}
	return cur, true
}
