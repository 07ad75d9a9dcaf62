package logs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"trainyard/internal/domain"
)

// expiredFile, in a job's directory, records that retention deleted the
// job's attempt directories.
const expiredFile = "expired.json"

// Expiry is the record left in a job's directory when its attempt
// directories were deleted under the log retention.
type Expiry struct {
	DeletedAt time.Time     `json:"deleted_at"`
	Retention time.Duration `json:"retention_ns"`
}

// RetentionString writes a retention period the way operators configure it:
// whole days as "30d", else a duration such as "36h".
func RetentionString(d time.Duration) string {
	if d > 0 && d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	return domain.FormatDuration(d)
}

// jobDir is the directory holding every attempt directory of one job.
func (l Layout) jobDir(jobID int64) string {
	return filepath.Join(l.Root, strconv.FormatInt(jobID, 10))
}

// Expire deletes the attempt directories (logs, working directories,
// supervisor state) of one job and leaves an Expiry record in its place, so
// that readers can tell expired logs from missing ones. The record is
// written first: an interrupted expiry is finished by the next call. It
// reports whether anything was deleted; a job that never had a directory
// is left alone.
func (l Layout) Expire(jobID int64, e Expiry) (bool, error) {
	root, err := os.OpenRoot(l.Root)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read the attempt directories of job %d: %w", jobID, err)
	}
	defer root.Close()
	// Inside the root, and the job's directory itself no link: nothing
	// removed or written here leaves the job's own directory.
	dir := strconv.FormatInt(jobID, 10)
	if fi, err := root.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("read the attempt directories of job %d: %w", jobID, err)
	} else if !fi.IsDir() {
		return false, fmt.Errorf("read the attempt directories of job %d: %s is not a directory", jobID, l.jobDir(jobID))
	}
	f, err := root.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false, fmt.Errorf("read the attempt directories of job %d: %w", jobID, err)
	}
	ents, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return false, fmt.Errorf("read the attempt directories of job %d: %w", jobID, err)
	}
	var attempts []string
	for _, ent := range ents {
		if _, err := strconv.Atoi(ent.Name()); err == nil && ent.IsDir() {
			attempts = append(attempts, filepath.Join(dir, ent.Name()))
		}
	}
	if len(attempts) == 0 {
		return false, nil
	}
	b, _ := json.Marshal(e)
	tmp := filepath.Join(dir, expiredFile+".tmp")
	_ = root.Remove(tmp) // a link left there is removed, not followed (O_EXCL)
	if err := writeNew(root, tmp, append(b, '\n')); err != nil {
		return false, fmt.Errorf("record the expiry of job %d's logs: %w", jobID, err)
	}
	if err := root.Rename(tmp, filepath.Join(dir, expiredFile)); err != nil {
		return false, fmt.Errorf("record the expiry of job %d's logs: %w", jobID, err)
	}
	for _, a := range attempts {
		if err := root.RemoveAll(a); err != nil {
			return true, fmt.Errorf("delete the expired attempt directory %s: %w", filepath.Join(l.Root, a), err)
		}
	}
	return true, nil
}

// writeNew creates name in root, failing if anything (a link above all)
// is there, and writes data to it.
func writeNew(root *os.Root, name string, data []byte) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Expired returns the Expiry record of a job whose logs were deleted under
// the retention, and false when there is none.
func (l Layout) Expired(jobID int64) (Expiry, bool) {
	f, err := l.open(filepath.Join(strconv.FormatInt(jobID, 10), expiredFile))
	if err != nil {
		return Expiry{}, false
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return Expiry{}, false
	}
	var e Expiry
	if err := json.Unmarshal(b, &e); err != nil {
		return Expiry{}, true // a damaged record still means the logs are gone
	}
	return e, true
}
