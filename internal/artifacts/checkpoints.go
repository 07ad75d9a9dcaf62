package artifacts

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"trainyard/internal/domain"
)

// Checkpoints, by the rules of domain.CheckpointMarker. Everything here is
// read through the Dir's guarded openers: a marker, a trainer state or a
// zip file counts only as a regular file of the job's own, never through a
// link, and a fifo in any of those places is looked at, never opened for
// reading in a way that waits.

// ErrIncomplete says a checkpoint is not complete (see
// domain.CheckpointMarker).
var ErrIncomplete = errors.New("checkpoint not complete")

// Found is one checkpoint in a checkpoint directory.
type Found struct {
	Name string
	Path string
	// Complete: made complete by one of the rules of
	// domain.CheckpointMarker; when not, Why says what would make it so.
	Complete bool
	Why      string
	// Size and Files are of its regular files: the file itself, or every
	// regular file below the directory, its marker included.
	Size  int64
	Files int
	// ModTime is when it was completed (the mtime of its marker, of its
	// trainer state, or of the zip file itself), or, when it is not, when
	// it last changed.
	ModTime time.Time
	// SHA256 is its digest (hex; see Digest); empty in listings.
	SHA256 string
}

const markerName = domain.CheckpointMarker

// hfCheckpoint reports whether name is the directory name of a Hugging
// Face Trainer checkpoint (^checkpoint-[0-9]+$). A loop, not a regexp: a
// package-level regexp is compiled by every program that links this
// package (the attempt supervisor too), at its start.
func hfCheckpoint(name string) bool {
	digits, ok := strings.CutPrefix(name, "checkpoint-")
	if !ok || digits == "" {
		return false
	}
	for i := range len(digits) {
		if digits[i] < '0' || digits[i] > '9' {
			return false
		}
	}
	return true
}

// Checkpoints lists the checkpoints in the directory's CheckpointsDir,
// oldest first (by ModTime, then name), each complete or not by the rules
// of domain.CheckpointMarker. Names that listed refuses are left out, and
// so are entries that are neither regular files nor directories (links
// above all). A CheckpointsDir that is missing, or is not a directory,
// holds none. Only what tells a complete file from a half-written one is
// read: its marker's status, or the central directory of a zip.
func (d *Dir) Checkpoints() ([]Found, error) {
	f, err := d.openDir(CheckpointsDir)
	if changed(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list checkpoints in %s: %w", d.Join(CheckpointsDir), err)
	}
	ents, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("list checkpoints in %s: %w", d.Join(CheckpointsDir), err)
	}
	var out []Found
	for _, e := range ents {
		name := e.Name()
		if !domain.IsCheckpointName(name) {
			continue
		}
		rel := CheckpointsDir + "/" + name
		fi, err := d.root.Lstat(rel)
		if err != nil {
			continue // removed meanwhile
		}
		c := Found{Name: name, Path: d.Join(rel)}
		switch {
		case fi.Mode().IsRegular():
			f, ofi, err := d.Open(rel)
			if changed(err) {
				continue
			}
			if err != nil { // unreadable: only a marker can make it complete
				d.judgeFile(&c, rel, nil, fi)
				break
			}
			d.judgeFile(&c, rel, f, ofi)
			f.Close()
		case fi.IsDir():
			if err := d.judgeDir(&c, rel, nil); changed(err) {
				continue
			} else if err != nil {
				return nil, fmt.Errorf("list checkpoints in %s: %w", d.Join(CheckpointsDir), err)
			}
		default:
			continue
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Found) int {
		if c := a.ModTime.Compare(b.ModTime); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, nil
}

// judgeFile fills in c for the regular file checkpoint rel, open as f
// (fi: its information; f nil: it cannot be read): complete when the
// marker NAME.complete beside it is a regular file, or when its bytes are
// one whole zip archive.
func (d *Dir) judgeFile(c *Found, rel string, f *os.File, fi fs.FileInfo) {
	c.Size, c.Files, c.ModTime = fi.Size(), 1, fi.ModTime()
	marker := rel + markerName
	mfi, merr := d.root.Lstat(marker)
	if merr == nil && mfi.Mode().IsRegular() {
		c.Complete, c.ModTime = true, mfi.ModTime()
		return
	}
	var looksZip bool
	if f != nil {
		var whole bool
		if whole, looksZip = wholeZip(f, fi.Size()); whole {
			c.Complete = true
			return
		}
	}
	base := c.Name + markerName
	switch {
	case merr == nil:
		c.Why = fmt.Sprintf("%s is a %s, not a regular file: remove it, then write %s after the file", base, kind(mfi.Mode()), base)
	case looksZip:
		c.Why = fmt.Sprintf("not a whole zip archive (a save cut short?) and no marker: write %s after the file, or save it with trainyard.save_checkpoint", base)
	default:
		c.Why = fmt.Sprintf("no marker: write %s after the file, or save it with trainyard.save_checkpoint", base)
	}
}

// zipMagic starts a zip archive's first local file header.
var zipMagic = []byte("PK\x03\x04")

// wholeZip reports whether the size bytes of r are one whole zip archive:
// its central directory, which is written last, reads. looksZip: r starts
// as a zip archive does (for messages).
func wholeZip(r io.ReaderAt, size int64) (whole, looksZip bool) {
	if _, err := zip.NewReader(r, size); err == nil || errors.Is(err, zip.ErrInsecurePath) {
		return true, true
	}
	head := make([]byte, len(zipMagic))
	n, _ := r.ReadAt(head, 0)
	return false, bytes.Equal(head[:n], zipMagic)
}

// judgeDir fills in c for the checkpoint directory rel from one walk of
// it: complete when it holds domain.CheckpointMarker as a regular file or,
// named checkpoint-N, domain.HFTrainerState. each, when not nil, gets the
// path of every regular file below it.
func (d *Dir) judgeDir(c *Found, rel string, each func(p string)) error {
	c.Size, c.Files, c.ModTime = 0, 0, time.Time{}
	var latest time.Time
	seen := map[string]bool{} // top-level marker and trainer state, as regular files of the walked directory
	err := d.walk(rel, nil, func(p string, e fs.DirEntry) error {
		if !e.Type().IsRegular() {
			return nil
		}
		fi, err := d.root.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() {
			return nil // removed or replaced meanwhile
		}
		c.Size += fi.Size()
		c.Files++
		if fi.ModTime().After(latest) {
			latest = fi.ModTime()
		}
		if sub := p[len(rel)+1:]; sub == markerName || sub == domain.HFTrainerState {
			seen[sub] = true
		}
		if each != nil {
			each(p)
		}
		return nil
	}, nil)
	if err != nil {
		return err
	}
	c.ModTime = latest
	if t, ok := d.regular(rel+"/"+markerName, seen[markerName]); ok {
		c.Complete, c.ModTime = true, t
		return nil
	}
	hf := hfCheckpoint(c.Name)
	if hf {
		if t, ok := d.regular(rel+"/"+domain.HFTrainerState, seen[domain.HFTrainerState]); ok {
			c.Complete, c.ModTime = true, t
			return nil
		}
	}
	if mfi, err := d.root.Lstat(rel + "/" + markerName); err == nil {
		c.Why = fmt.Sprintf("%s inside is a %s, not a regular file: remove it, then write it after the data, or call checkpoint_done", markerName, kind(mfi.Mode()))
		return nil
	}
	if hf {
		if sfi, err := d.root.Lstat(rel + "/" + domain.HFTrainerState); err == nil {
			c.Why = fmt.Sprintf("%s inside is a %s, not a regular file, and there is no %s marker: write %s after the data, or call checkpoint_done", domain.HFTrainerState, kind(sfi.Mode()), markerName, markerName)
		} else {
			c.Why = fmt.Sprintf("no %s inside (the Trainer writes it last), nor a %s marker: write %s after the data, or call checkpoint_done", domain.HFTrainerState, markerName, markerName)
		}
		return nil
	}
	c.Why = fmt.Sprintf("no %s marker inside: write it after the data, or call checkpoint_done", markerName)
	return nil
}

// regular returns the mtime of name when the walk saw it as a regular
// file (walked) and it still is one.
func (d *Dir) regular(name string, walked bool) (time.Time, bool) {
	if !walked {
		return time.Time{}, false
	}
	fi, err := d.root.Lstat(name)
	if err != nil || !fi.Mode().IsRegular() {
		return time.Time{}, false
	}
	return fi.ModTime(), true
}

// checkpointName checks that name can name a checkpoint directly below
// CheckpointsDir.
func checkpointName(name string) error {
	if !domain.IsCheckpointName(name) {
		return fmt.Errorf("%q is not a checkpoint name: the name of a file or directory directly below %s, not hidden, not ending in .tmp or %s", name, CheckpointsDir, markerName)
	}
	return nil
}

// Digest reads the complete checkpoint name (directly below
// CheckpointsDir) and returns it with its SHA256: of a file, the SHA-256
// of its bytes; of a directory, the SHA-256 of the lines
// "<sha256 hex>  <size>  <path>\n" of its regular files in lexical order
// of their slash-separated paths below it, leaving out its
// domain.CheckpointMarker (links, fifos and the like are no data and are
// left out too). Size and Files count what the listing counts. One that
// is not complete is an error matching ErrIncomplete; a missing one
// matches fs.ErrNotExist, a link or another special file ErrNotRegular.
// Files are read one after the other through one buffer.
func (d *Dir) Digest(name string) (Found, error) {
	if err := checkpointName(name); err != nil {
		return Found{}, err
	}
	rel := CheckpointsDir + "/" + name
	c := Found{Name: name, Path: d.Join(rel)}
	fi, err := d.root.Lstat(rel)
	if err != nil {
		return Found{}, fmt.Errorf("digest checkpoint %s: %w", name, err)
	}
	buf := make([]byte, 256<<10)
	switch {
	case fi.Mode().IsRegular():
		f, ofi, err := d.Open(rel)
		if err != nil {
			return Found{}, fmt.Errorf("digest checkpoint %s: %w", name, err)
		}
		defer f.Close()
		d.judgeFile(&c, rel, f, ofi)
		if !c.Complete {
			return Found{}, fmt.Errorf("checkpoint %s: %w: %s", name, ErrIncomplete, c.Why)
		}
		h := sha256.New()
		n, err := io.CopyBuffer(h, onlyReader{f}, buf)
		if err != nil {
			return Found{}, fmt.Errorf("digest checkpoint %s: %w", name, err)
		}
		c.Size, c.SHA256 = n, hex.EncodeToString(h.Sum(nil))
		return c, nil
	case fi.IsDir():
		var paths []string
		if err := d.judgeDir(&c, rel, func(p string) { paths = append(paths, p) }); err != nil {
			return Found{}, fmt.Errorf("digest checkpoint %s: %w", name, err)
		}
		if !c.Complete {
			return Found{}, fmt.Errorf("checkpoint %s: %w: %s", name, ErrIncomplete, c.Why)
		}
		// Lexical order of the whole path: the walk's order, directory by
		// directory, puts a/x before a-b and a.txt.
		slices.Sort(paths)
		h := sha256.New()
		c.Size, c.Files = 0, 0
		for _, p := range paths {
			size, sum, err := d.hashFile(p, buf)
			if changed(err) {
				continue // removed or replaced since listed
			}
			if err != nil {
				return Found{}, fmt.Errorf("digest checkpoint %s: %w", name, err)
			}
			c.Size += size
			c.Files++
			if sub := p[len(rel)+1:]; sub != markerName {
				fmt.Fprintf(h, "%s  %d  %s\n", sum, size, sub)
			}
		}
		c.SHA256 = hex.EncodeToString(h.Sum(nil))
		return c, nil
	}
	return Found{}, &fs.PathError{Op: "digest", Path: d.Join(rel), Err: ErrNotRegular}
}

// MarkComplete writes the marker that makes the checkpoint name (directly
// below CheckpointsDir) complete: domain.CheckpointMarker inside a
// directory, NAME.complete beside a regular file. The checkpoint must be
// one of those, not a link; a marker already there is kept as it is when
// it is a regular file and refused when it is anything else (a link above
// all: following it would create or truncate a file elsewhere).
func (d *Dir) MarkComplete(name string) error {
	if err := checkpointName(name); err != nil {
		return err
	}
	rel := CheckpointsDir + "/" + name
	fi, err := d.root.Lstat(rel)
	if err != nil {
		return err
	}
	var marker string
	switch {
	case fi.IsDir():
		marker = rel + "/" + markerName
	case fi.Mode().IsRegular():
		marker = rel + markerName
	default:
		return fmt.Errorf("%s is a %s, not a regular file or a directory", d.Join(rel), kind(fi.Mode()))
	}
	// O_EXCL never follows a link, dangling or not.
	f, err := d.root.OpenFile(marker, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NONBLOCK, 0o644)
	if err == nil {
		return f.Close()
	}
	if !errors.Is(err, fs.ErrExist) {
		return err
	}
	if mfi, err := d.root.Lstat(marker); err != nil {
		return err
	} else if !mfi.Mode().IsRegular() {
		return fmt.Errorf("%s is a %s, not a regular file; remove it and mark the checkpoint complete again", d.Join(marker), kind(mfi.Mode()))
	}
	return nil
}
