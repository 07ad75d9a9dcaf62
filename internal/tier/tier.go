// Package tier keeps checkpoints on the object-store tier: the copy of a
// job's checkpoint at checkpoints/<job>/<name>/<file> in the bucket, how
// it is verified, read back, restored into a job's tree and removed.
//
// The bucket is trusted no more than the job's tree: every byte read from
// it is checked against the checkpoint's registered digest (see
// executor.Outputs.Digest), its size against the registered size, and its
// keys against the rules of a path below the checkpoint, before anything
// is used or written.
package tier

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"path"
	"strconv"
	"strings"

	"trainyard/internal/blob"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
)

// Prefix is where a checkpoint's files are kept in the object store.
func Prefix(jobID int64, name string) string {
	return "checkpoints/" + strconv.FormatInt(jobID, 10) + "/" + name + "/"
}

// Key is where the checkpoint's file rel is kept: rel is the path below
// the checkpoint's directory, or the checkpoint's own name when it is one
// file.
func Key(jobID int64, name, rel string) string { return Prefix(jobID, name) + rel }

// ErrMismatch says the object copy is not the registered checkpoint: its
// files, sizes or digest differ.
var ErrMismatch = errors.New("the object copy does not match the checkpoint")

// Object is one file of a checkpoint's object copy.
type Object struct {
	Rel  string // below the checkpoint: a path in its directory, or its name when it is one file
	Key  string
	Size int64
}

// List returns the files of the checkpoint's object copy, in order of
// path, and whether it is one file (its only object is named like the
// checkpoint). A copy whose sizes do not add up to size (the registered
// size), or with a key that is no path below the checkpoint, is an error
// matching ErrMismatch; no copy at all matches blob.ErrNotFound.
func List(ctx context.Context, bs blob.Store, c domain.CheckpointRecord) ([]Object, bool, error) {
	prefix := Prefix(c.JobID, c.Name)
	var out []Object
	var total int64
	for info, err := range bs.List(ctx, prefix) {
		if err != nil {
			return nil, false, err
		}
		rel := strings.TrimPrefix(info.Key, prefix)
		if clean := path.Clean(rel); clean != rel || rel == "" || strings.HasPrefix(rel, "../") || path.IsAbs(rel) {
			return nil, false, fmt.Errorf("checkpoint %s of job %d: object %q is no path below it: %w", c.Name, c.JobID, info.Key, ErrMismatch)
		}
		out = append(out, Object{Rel: rel, Key: info.Key, Size: info.Size})
		total += info.Size
	}
	if len(out) == 0 {
		return nil, false, blob.NotFound(prefix)
	}
	if total != c.Size {
		return nil, false, fmt.Errorf("checkpoint %s of job %d: the object copy holds %d bytes, the checkpoint %d: %w", c.Name, c.JobID, total, c.Size, ErrMismatch)
	}
	return out, len(out) == 1 && out[0].Rel == c.Name, nil
}

// digester computes a checkpoint's digest from its files in order of
// path, as executor.Outputs.Digest does.
type digester struct {
	one   bool
	whole hash.Hash // the checkpoint's digest
	each  hash.Hash // the current file's, for a directory
}

func newDigester(one bool) *digester {
	return &digester{one: one, whole: sha256.New(), each: sha256.New()}
}

// file returns a reader of one file's bytes r (listed as size bytes)
// that hashes what is read, and done, which reads what is left and adds
// the file to the digest: a short or long file is an error matching
// ErrMismatch. At most one byte beyond size is ever read.
func (d *digester) file(rel string, size int64, r io.Reader) (io.Reader, func() error) {
	h := d.whole
	if !d.one {
		d.each.Reset()
		h = d.each
	}
	cr := &counter{r: io.TeeReader(io.LimitReader(r, size+1), h)}
	return cr, func() error {
		if _, err := io.Copy(io.Discard, cr); err != nil {
			return err
		}
		if cr.n != size {
			return fmt.Errorf("object %s does not hold the %d bytes listed: %w", rel, size, ErrMismatch)
		}
		if !d.one && rel != domain.CheckpointMarker {
			fmt.Fprintf(d.whole, "%s  %d  %s\n", hex.EncodeToString(d.each.Sum(nil)), size, rel)
		}
		return nil
	}
}

type counter struct {
	r io.Reader
	n int64
}

func (c *counter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (d *digester) sum() string { return hex.EncodeToString(d.whole.Sum(nil)) }

// Walk reads the checkpoint's object copy file by file, in order of path,
// calling fn with each (rel as in Object), and checks the digest at the
// end: a copy whose bytes are not the registered checkpoint's is an error
// matching ErrMismatch, returned after fn has seen them all, so a caller
// that streams them on must be able to take them back (cut the stream,
// remove the files). A checkpoint registered without a digest is checked
// for its size only.
func Walk(ctx context.Context, bs blob.Store, c domain.CheckpointRecord, fn func(o Object, one bool, r io.Reader) error) error {
	objs, one, err := List(ctx, bs, c)
	if err != nil {
		return err
	}
	d := newDigester(one)
	for _, o := range objs {
		rc, info, err := bs.Get(ctx, o.Key)
		if err != nil {
			return err
		}
		if info.Size != o.Size {
			rc.Close()
			return fmt.Errorf("object %s changed while it was read: %w", o.Key, ErrMismatch)
		}
		r, done := d.file(o.Rel, o.Size, rc)
		err = fn(o, one, r)
		if err == nil {
			err = done()
		}
		rc.Close()
		if err != nil {
			return fmt.Errorf("read checkpoint %s of job %d from the object store: %w", c.Name, c.JobID, err)
		}
	}
	if c.SHA256 != "" && d.sum() != c.SHA256 {
		return fmt.Errorf("checkpoint %s of job %d: the object copy has sha256 %s, the checkpoint %s: %w", c.Name, c.JobID, d.sum(), c.SHA256, ErrMismatch)
	}
	return nil
}

// Verify reads the whole object copy back and checks it is the
// checkpoint (Walk).
func Verify(ctx context.Context, bs blob.Store, c domain.CheckpointRecord) error {
	return Walk(ctx, bs, c, func(_ Object, _ bool, r io.Reader) error {
		_, err := io.Copy(io.Discard, r)
		return err
	})
}

// Copy puts every regular file of the checkpoint c in o into bs (links
// and special files are the job's business, not data), removes objects of
// an earlier version that it no longer holds, and reads the copy back
// (Verify): only then is the copy good.
func Copy(ctx context.Context, bs blob.Store, o executor.Outputs, c domain.CheckpointRecord) error {
	dir := executor.CheckpointsDir + "/" + c.Name
	put := map[string]bool{}
	err := o.Walk(ctx, dir, func(f executor.OutputFile) error {
		rel := strings.TrimPrefix(f.Path, dir+"/")
		if f.Path == dir { // a checkpoint that is one file
			rel = c.Name
		}
		put[Key(c.JobID, c.Name, rel)] = true
		_, err := bs.Put(ctx, Key(c.JobID, c.Name, rel), f, f.Size)
		return err
	})
	if err != nil {
		return fmt.Errorf("copy checkpoint %s of job %d to the object store: %w", c.Name, c.JobID, err)
	}
	var stale []string
	for info, err := range bs.List(ctx, Prefix(c.JobID, c.Name)) {
		if err != nil {
			return err
		}
		if !put[info.Key] {
			stale = append(stale, info.Key)
		}
	}
	for _, k := range stale {
		if err := bs.Delete(ctx, k); err != nil {
			return err
		}
	}
	return Verify(ctx, bs, c)
}

// Delete removes the checkpoint's object copy; none is no error.
func Delete(ctx context.Context, bs blob.Store, jobID int64, name string) error {
	var keys []string
	for info, err := range bs.List(ctx, Prefix(jobID, name)) {
		if err != nil {
			return err
		}
		keys = append(keys, info.Key)
	}
	for _, k := range keys {
		if err := bs.Delete(ctx, k); err != nil {
			return fmt.Errorf("remove checkpoint %s of job %d from the object store: %w", name, jobID, err)
		}
	}
	return nil
}

// stagingName is where Restore writes a checkpoint before moving it into
// place: hidden, so it is never taken for a checkpoint.
func stagingName(name string) string { return executor.CheckpointsDir + "/.restore-" + name }

// Restore writes the checkpoint's object copy into o (which must be an
// executor.Restorer) as CheckpointsDir/<name>: first into a hidden
// staging path, verified as it is written (Walk), then moved into place
// and made complete, then digested again in place. Nothing is written
// outside o, and nothing already at the checkpoint's name is replaced: a
// copy already there with the right digest is kept (nil), anything else
// there is an error. A copy that does not verify is removed again.
func Restore(ctx context.Context, bs blob.Store, o executor.Outputs, c domain.CheckpointRecord) error {
	w, ok := o.(executor.Restorer)
	if !ok {
		return errors.New("this executor's outputs cannot be written by the server")
	}
	if got, err := o.Digest(ctx, c.Name); err == nil && (c.SHA256 == "" || got.SHA256 == c.SHA256) {
		return nil
	}
	if _, err := o.Open(ctx, executor.CheckpointsDir+"/"+c.Name); err == nil || errors.Is(err, executor.ErrNotRegular) {
		return fmt.Errorf("restore checkpoint %s of job %d: something else is in its place in the checkpoint directory", c.Name, c.JobID)
	}
	stage := stagingName(c.Name)
	if err := o.Remove(ctx, stage); err != nil {
		return err
	}
	one := false
	err := Walk(ctx, bs, c, func(obj Object, single bool, r io.Reader) error {
		one = single
		rel := stage
		if !single {
			rel = stage + "/" + obj.Rel
		}
		f, err := w.CreateFile(ctx, rel)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, r); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	})
	if err == nil {
		err = w.Rename(ctx, stage, executor.CheckpointsDir+"/"+c.Name)
	}
	if err != nil {
		_ = o.Remove(ctx, stage)
		return err
	}
	if one {
		// A file made complete by its marker beside it (the marker is
		// no data, so it was not copied).
		if err := o.MarkComplete(ctx, c.Name); err != nil {
			return err
		}
	}
	got, err := o.Digest(ctx, c.Name)
	if err == nil && c.SHA256 != "" && got.SHA256 != c.SHA256 {
		err = fmt.Errorf("checkpoint %s of job %d restored with sha256 %s, want %s: %w", c.Name, c.JobID, got.SHA256, c.SHA256, ErrMismatch)
	}
	if err != nil {
		_ = o.Remove(ctx, executor.CheckpointsDir+"/"+c.Name)
		_ = o.Remove(ctx, executor.CheckpointsDir+"/"+c.Name+domain.CheckpointMarker)
		return err
	}
	return nil
}
