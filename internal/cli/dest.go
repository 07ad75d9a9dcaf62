package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// destDir is the directory a download writes into (--dest). The paths come
// from the server, so none is trusted: each must be relative and stay
// inside (no "..", not absolute), and every file and directory is made
// through an os.Root on the directory, so a symbolic link already in it
// cannot lead a write outside either. A file already there is replaced
// only with force (--force).
type destDir struct {
	root  *os.Root
	name  string // as the user gave it, for messages
	force bool
}

func openDest(dir string, force bool) (*destDir, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	return &destDir{root: root, name: dir, force: force}, nil
}

func (d *destDir) Close() error { return d.root.Close() }

// place checks a slash-separated path the server named and creates its
// parent directories; it returns the path in local form, relative to d.
func (d *destDir) place(name string) (string, error) {
	bad := name == "" || strings.ContainsRune(name, 0) || strings.Contains(name, `\`) || path.IsAbs(name) ||
		path.Clean(name) == "."
	for _, seg := range strings.Split(name, "/") {
		bad = bad || seg == ".."
	}
	if bad {
		return "", fmt.Errorf("the server named %q, which is not a relative path inside %s; refusing to write it", name, d.name)
	}
	rel := filepath.FromSlash(path.Clean(name))
	if dir := filepath.Dir(rel); dir != "." {
		if err := d.root.MkdirAll(dir, 0o755); err != nil {
			return "", d.wrap(name, err)
		}
	}
	return rel, nil
}

// wrap says where a write failed; a symbolic link leading outside shows as
// "path escapes from parent".
func (d *destDir) wrap(name string, err error) error {
	return fmt.Errorf("cannot write %s inside %s: %w", name, d.name, err)
}

// exists reports whether anything (a link included) is at rel.
func (d *destDir) exists(rel string) bool {
	_, err := d.root.Lstat(rel)
	return !errors.Is(err, fs.ErrNotExist)
}

// refuseExisting fails when rel is there and force is off.
func (d *destDir) refuseExisting(name, rel string) error {
	if !d.force && d.exists(rel) {
		return fmt.Errorf("%s already exists in %s; pass --force to overwrite it, or choose another --dest", filepath.ToSlash(rel), d.name)
	}
	return nil
}

// create makes the file at rel, which must not exist unless force (see
// place for rel).
func (d *destDir) create(name, rel string) (*os.File, error) {
	if err := d.refuseExisting(name, rel); err != nil {
		return nil, err
	}
	flag := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if d.force {
		flag = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	f, err := d.root.OpenFile(rel, flag, 0o644)
	if err != nil {
		return nil, d.wrap(name, err)
	}
	return f, nil
}

// sha256 returns the hex SHA-256 and size of the file at rel.
func (d *destDir) sha256(rel string) (string, int64, error) {
	f, err := d.root.Open(rel)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", n, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
