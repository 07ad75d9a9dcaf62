package agent

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
)

// Resuming: the pod's checkpoint directory starts empty, so before the
// command starts the agent fetches the checkpoint the attempt resumes
// from. The executor names the candidates, the one to prefer first, in
// resumeEnv; the agent downloads the first one's archive with its job
// token, extracts it below TRAINYARD_CHECKPOINT_DIR/NAME and checks its
// digest against the one registered, with the rule the server registers
// it by (artifacts.Dir.Digest, as executor.Outputs.Digest). One that
// cannot be fetched, is hostile or does not match is removed and the next
// is tried; the command gets TRAINYARD_RESUME_FROM, the local path of the
// one picked (empty: none), and the agent reports which one it was to the
// API (POST …/resumed), which records the attempt's lineage.
//
// The archive is the job's data, so hostile: only regular files and
// directories below NAME are taken (no absolute path, no "..", no link,
// no device), written through the output directory's os.Root, never over
// anything, and no more bytes than the checkpoint has registered, nor
// than the disk holds.

// resumeEnv names the variable the Kubernetes executor hands the
// candidates in: a JSON array of {"name", "sha256"}.
const resumeEnv = "TRAINYARD_AGENT_RESUME"

// Bounds of fetching a checkpoint.
const (
	// maxEntries bounds the entries of one archive.
	maxEntries = 1 << 20
	// stallAfter bounds the wait for the next bytes of a download.
	stallAfter = 2 * time.Minute
	// maxNote bounds the note reported (service.MaxResumeNote).
	maxNote = 4096
)

// candidate is one checkpoint the attempt may resume from.
type candidate struct {
	Name   string `json:"name"`
	SHA256 string `json:"sha256,omitempty"`
}

// parseCandidates reads resumeEnv's value.
func parseCandidates(v string) ([]candidate, error) {
	var cs []candidate
	if err := json.Unmarshal([]byte(v), &cs); err != nil {
		return nil, fmt.Errorf("%s is not a JSON list of {\"name\", \"sha256\"}: %v", resumeEnv, err)
	}
	return cs, nil
}

// resumed is what resume picked: the checkpoint's name (empty: none), the
// path the command gets, and why the candidates before it were skipped.
type resumed struct {
	name, path string
	skipped    []string
}

// note is the skipped candidates as one line for the API.
func (r resumed) note() string {
	n := strings.Join(r.skipped, "; ")
	n = strings.Map(func(c rune) rune {
		if unicode.IsControl(c) {
			return ' '
		}
		return c
	}, strings.ToValidUTF8(n, "?"))
	if len(n) > maxNote {
		cut := maxNote - len("…")
		for cut > 0 && !utf8.RuneStart(n[cut]) {
			cut--
		}
		n = n[:cut] + "…"
	}
	return n
}

// resume fetches the first of cands that it can verify into the
// checkpoint directory and returns it; o is nil when the checkpoint
// directory cannot be written (then every candidate is skipped). Each
// skipped one is logged with why.
func resume(o *outputs, cfg config, cands []candidate, log *logger) resumed {
	var r resumed
	skip := func(c candidate, why string) {
		r.skipped = append(r.skipped, c.Name+": "+why)
		log.printf("not resuming from checkpoint %s: %s", c.Name, why)
	}
	if o == nil || !o.checkpoints {
		for _, c := range cands {
			skip(c, "the agent cannot write TRAINYARD_CHECKPOINT_DIR (its log says why)")
		}
		return r
	}
	registered, listErr := o.listRegistered()
	for _, c := range cands {
		if !domain.IsCheckpointName(c.Name) {
			skip(c, "not a checkpoint name")
			continue
		}
		var size int64 = -1
		switch rec, ok := registered[c.Name]; {
		case listErr != nil:
			// The archive alone still says what it holds; the disk bounds it.
		case !ok:
			skip(c, "no longer registered (deleted meanwhile)")
			continue
		default:
			size = rec.Size
		}
		if err := o.fetch(c, size); err != nil {
			skip(c, err.Error())
			continue
		}
		r.name, r.path = c.Name, filepath.Join(cfg.checkpointDir, c.Name)
		o.remember(c.Name)
		log.printf("resuming from checkpoint %s (digest verified)", c.Name)
		return r
	}
	if len(cands) > 0 {
		log.printf("no checkpoint to resume from could be fetched intact; starting afresh")
	}
	return r
}

// listRegistered returns the job's registered checkpoints by name.
func (o *outputs) listRegistered() (map[string]apitypes.Checkpoint, error) {
	p := "/api/v1/jobs/" + strconv.FormatInt(o.rep.jobID, 10) + "/checkpoints"
	resp, err := o.rep.do("GET "+p, func() (*http.Request, error) {
		return http.NewRequest(http.MethodGet, o.rep.base+p, nil)
	})
	if err != nil {
		o.log.printf("list the job's checkpoints: %v; each archive is bounded by the disk only", describe(err))
		return nil, err
	}
	defer resp.Body.Close()
	var l apitypes.CheckpointList
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&l); err != nil {
		o.log.printf("list the job's checkpoints: the answer cannot be read (%v); each archive is bounded by the disk only", err)
		return nil, err
	}
	m := make(map[string]apitypes.Checkpoint, len(l.Checkpoints))
	for _, c := range l.Checkpoints {
		m[c.Name] = c
	}
	return m, nil
}

// describe says what went wrong with a call, for a note.
func describe(err error) string {
	var ref *refusal
	if errors.As(err, &ref) {
		return "the server answered " + ref.status + answer(ref.body)
	}
	return err.Error()
}

// fetch downloads checkpoint c (of at most size bytes; -1: unknown) into
// the checkpoint directory, makes it complete and checks its digest. On
// any error what it wrote is removed.
func (o *outputs) fetch(c candidate, size int64) (err error) {
	rel := checkpointRel(c.Name)
	for _, p := range []string{rel, rel + domain.CheckpointMarker} {
		if _, err := o.root.Lstat(p); err == nil {
			// Not the agent's: the directory started empty.
			return fmt.Errorf("something is already at %s; it is left as it is", p)
		}
	}
	defer func() {
		if err != nil {
			o.discard(c.Name)
		}
	}()
	p := "/api/v1/jobs/" + strconv.FormatInt(o.rep.jobID, 10) + "/checkpoints/" + url.PathEscape(c.Name) + "/archive"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, err := o.rep.do("GET "+p, func() (*http.Request, error) {
		return http.NewRequestWithContext(ctx, http.MethodGet, o.rep.base+p, nil)
	})
	if err != nil {
		return fmt.Errorf("the archive could not be downloaded: %s", describe(err))
	}
	defer resp.Body.Close()
	body := newStallReader(resp.Body, stallAfter, cancel)
	defer body.stop()
	if err := o.extract(c.Name, body, size); err != nil {
		if body.stalled() {
			return fmt.Errorf("the download stalled for %v", stallAfter)
		}
		return err
	}
	// A one-file checkpoint comes without its marker (NAME.complete), a
	// directory may (a trainer's checkpoint-N is complete without one):
	// complete either way once it is all there.
	if err := o.dir.MarkComplete(c.Name); err != nil {
		return fmt.Errorf("mark it complete: %v", err)
	}
	got, err := o.dir.Digest(c.Name)
	if err != nil {
		return fmt.Errorf("its digest cannot be computed: %v", err)
	}
	if c.SHA256 != "" && got.SHA256 != c.SHA256 {
		return fmt.Errorf("its files are not the registered checkpoint's (sha256 %s, downloaded %s)", short(c.SHA256), short(got.SHA256))
	}
	return nil
}

func short(h string) string { return h[:min(12, len(h))] }

// checkpointRel is checkpoint name's path below the output directory.
func checkpointRel(name string) string { return path.Join("checkpoints", name) }

// discard removes what fetch wrote for checkpoint name: the checkpoint
// and its marker beside it.
func (o *outputs) discard(name string) {
	rel := checkpointRel(name)
	for _, p := range []string{rel, rel + domain.CheckpointMarker} {
		if err := o.dir.RemoveAll(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			o.log.printf("remove %s: %v", p, err)
		}
	}
}

// extract writes the tar stream r below the checkpoint directory: the
// regular file NAME, or the directory NAME and what is below it, nothing
// else; at most size bytes of files (-1: unknown) and never more than the
// disk has free.
func (o *outputs) extract(name string, r io.Reader, size int64) error {
	free := o.freeBytes()
	var total int64
	entries := 0
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("the archive cannot be read: %v", err)
		}
		entries++
		if entries > maxEntries {
			return fmt.Errorf("the archive holds more than %d entries", maxEntries)
		}
		rel, err := entryPath(name, h)
		if err != nil {
			return err
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := o.mkdirs(rel); err != nil {
				return fmt.Errorf("archive entry %q: %v", h.Name, err)
			}
		case tar.TypeReg:
			if h.Size < 0 {
				return fmt.Errorf("archive entry %q has a negative size", h.Name)
			}
			total += h.Size
			switch {
			case size >= 0 && total > size:
				return fmt.Errorf("the archive holds more than the %d bytes registered", size)
			case free >= 0 && total > free:
				return fmt.Errorf("the archive holds more than the %d bytes free on the disk", free)
			}
			if err := o.mkdirs(path.Dir(rel)); err != nil {
				return fmt.Errorf("archive entry %q: %v", h.Name, err)
			}
			if err := o.writeFile(rel, tr, h.Size); err != nil {
				return fmt.Errorf("archive entry %q: %v", h.Name, err)
			}
		default:
			return fmt.Errorf("archive entry %q is a %s, not a regular file or a directory", h.Name, entryKind(h.Typeflag))
		}
	}
	if entries == 0 {
		return errors.New("the archive is empty")
	}
	if _, err := o.root.Lstat(checkpointRel(name)); err != nil {
		return fmt.Errorf("the archive holds nothing at %s: %v", name, err)
	}
	return nil
}

// entryPath checks the name of archive entry h, which must be name or a
// clean relative path below it, and returns its path below the output
// directory.
func entryPath(name string, h *tar.Header) (string, error) {
	n := h.Name
	if h.Typeflag == tar.TypeDir {
		n = strings.TrimSuffix(n, "/")
	}
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("archive entry %q %s, not %s or a clean path below it", h.Name, why, name)
	}
	switch {
	case n == "":
		return bad("has no name")
	case strings.IndexByte(n, 0) >= 0:
		return bad("holds a NUL byte")
	case strings.HasPrefix(n, "/"):
		return bad("is absolute")
	}
	parts := strings.Split(n, "/")
	for _, p := range parts {
		if p == "" || p == "." || p == ".." {
			return bad(fmt.Sprintf("has a %q component", p))
		}
	}
	if parts[0] != name {
		return bad("is not below the checkpoint")
	}
	if len(parts) > maxDepth {
		return bad("is too deep")
	}
	return path.Join("checkpoints", n), nil
}

// entryKind names a tar entry type for an error.
func entryKind(t byte) string {
	switch t {
	case tar.TypeSymlink:
		return "symbolic link"
	case tar.TypeLink:
		return "hard link"
	case tar.TypeChar, tar.TypeBlock:
		return "device"
	case tar.TypeFifo:
		return "fifo"
	}
	return fmt.Sprintf("entry of tar type %q", string(rune(t)))
}

// mkdirs makes the directory rel (below the output directory) and those
// above it that are missing; what is there on the way must be a
// directory, not a link.
func (o *outputs) mkdirs(rel string) error {
	dir := ""
	for p := range strings.SplitSeq(rel, "/") {
		dir = path.Join(dir, p)
		fi, err := o.root.Lstat(dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := o.root.Mkdir(dir, 0o755); err != nil {
				return err
			}
		case err != nil:
			return err
		case !fi.IsDir():
			return fmt.Errorf("%s is not a directory", dir)
		}
	}
	return nil
}

// writeFile creates the regular file rel with n bytes of r; something
// already there (a second entry of the same name) is an error.
func (o *outputs) writeFile(rel string, r io.Reader, n int64) error {
	f, err := o.root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return err
	}
	_, err = io.CopyN(f, r, n)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// freeBytes is what the checkpoint directory's file system has free for
// the agent, or -1 when it cannot tell.
func (o *outputs) freeBytes() int64 {
	var st syscall.Statfs_t
	if err := syscall.Statfs(o.dir.Join("checkpoints"), &st); err != nil {
		return -1
	}
	return int64(st.Bavail) * int64(st.Bsize)
}

// remember records the checkpoint name, fetched, as reported: the
// scanner reports it only once the job changes it, and then only its
// changed files.
func (o *outputs) remember(name string) {
	rel := checkpointRel(name)
	found, err := o.dir.Checkpoints()
	if err != nil {
		return
	}
	for _, c := range found {
		if c.Name == name {
			o.listed[name] = listSig{mod: c.ModTime, size: c.Size, files: c.Files}
		}
	}
	seen := func(p string, f *os.File, fi fs.FileInfo) { o.sent[p] = sigOf(fi) }
	fi, err := o.root.Lstat(rel)
	if err != nil {
		return
	}
	marker := rel + domain.CheckpointMarker
	if fi.IsDir() {
		marker = rel + "/" + domain.CheckpointMarker
		o.walk(rel, 0, nil, seen)
	} else {
		o.file(rel, seen)
		o.file(marker, seen)
	}
	o.file(marker, func(p string, f *os.File, fi fs.FileInfo) {
		h := sha256.New()
		if _, err := io.Copy(h, io.NewSectionReader(f, 0, fi.Size())); err == nil {
			o.markers[name] = hex.EncodeToString(h.Sum(nil))
		}
	})
}

// reportResumed tells the API which checkpoint the attempt resumed from.
func reportResumed(rep *reporter, r resumed) {
	_ = rep.postJSON("resumed", "/resumed", apitypes.ResumeReport{Name: r.name, Note: r.note()})
}

// stallReader passes r on and calls cancel when no bytes came for after.
type stallReader struct {
	r       io.Reader
	t       *time.Timer
	after   time.Duration
	expired chan struct{}
}

func newStallReader(r io.Reader, after time.Duration, cancel func()) *stallReader {
	s := &stallReader{r: r, after: after, expired: make(chan struct{})}
	s.t = time.AfterFunc(after, func() {
		close(s.expired)
		cancel()
	})
	return s
}

func (s *stallReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if n > 0 {
		s.t.Reset(s.after)
	}
	return n, err
}

func (s *stallReader) stop() { s.t.Stop() }

func (s *stallReader) stalled() bool {
	select {
	case <-s.expired:
		return true
	default:
		return false
	}
}
