package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/artifacts"
	"trainyard/internal/domain"
)

// maxDepth bounds how deep the agent walks the job's tree.
const maxDepth = 64

// outputs uploads the job's output directory: its complete checkpoints as
// they appear, then, once the command has ended, every other regular file.
// Everything below the directory is the job's and may be hostile: paths
// are resolved inside it (os.Root), links, devices, fifos and sockets are
// skipped, and a file is read only when the open file is the regular file
// that was looked at. Used by one goroutine at a time (watch, then final).
type outputs struct {
	rep  *reporter
	log  *logger
	root *os.Root
	dir  *artifacts.Dir // the same directory, for the checkpoint rules
	// checkpoints: TRAINYARD_CHECKPOINT_DIR is the output directory's
	// checkpoints directory, so its checkpoints are watched.
	checkpoints bool
	every       time.Duration

	sent    map[string]fileSig // output path → the file last uploaded there
	listed  map[string]listSig // checkpoint name → how it looked when last reported
	markers map[string]string  // checkpoint name → digest of the marker last reported
	local   map[string]error   // paths whose reading failed, logged once
}

// fileSig tells a file apart from a rewritten one.
type fileSig struct {
	size int64
	mod  time.Time
	ino  uint64
}

func sigOf(fi fs.FileInfo) fileSig {
	s := fileSig{size: fi.Size(), mod: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.ino = st.Ino
	}
	return s
}

// listSig is a checkpoint as listed (artifacts.Found).
type listSig struct {
	mod   time.Time
	size  int64
	files int
}

// openOutputs creates the output and checkpoint directories (the job
// expects them) and opens the output directory.
func openOutputs(cfg config, rep *reporter, log *logger) (*outputs, error) {
	if err := os.MkdirAll(cfg.outputDir, 0o755); err != nil {
		return nil, err
	}
	o := &outputs{rep: rep, log: log, every: cfg.scanEvery,
		sent: map[string]fileSig{}, listed: map[string]listSig{}, markers: map[string]string{}, local: map[string]error{}}
	if o.every <= 0 {
		o.every = scanEvery
	}
	switch {
	case cfg.checkpointDir == "":
	case isCheckpointsOf(cfg.checkpointDir, cfg.outputDir):
		if err := os.MkdirAll(cfg.checkpointDir, 0o755); err != nil {
			return nil, err
		}
		o.checkpoints = true
	default:
		log.printf("TRAINYARD_CHECKPOINT_DIR (%s) is not TRAINYARD_OUTPUT_DIR/%s: its checkpoints are not reported", cfg.checkpointDir, artifacts.CheckpointsDir)
	}
	root, err := os.OpenRoot(cfg.outputDir)
	if err != nil {
		return nil, err
	}
	d, err := artifacts.OpenDir(cfg.outputDir)
	if err != nil {
		root.Close()
		return nil, err
	}
	// The same directory both ways, or neither.
	a, err1 := root.Stat(".")
	b, err2 := d.Lstat(".")
	if err1 != nil || err2 != nil || !os.SameFile(a, b) {
		root.Close()
		d.Close()
		return nil, fmt.Errorf("%s changed while it was opened", cfg.outputDir)
	}
	o.root, o.dir = root, d
	return o, nil
}

func (o *outputs) close() {
	o.root.Close()
	o.dir.Close()
}

// watch reports complete checkpoints every o.every until stop is closed;
// done is closed once it has returned.
func (o *outputs) watch(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	if !o.checkpoints {
		return
	}
	t := time.NewTimer(o.every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		o.scan()
		t.Reset(o.every)
	}
}

// final reports the checkpoints once more, then uploads every other
// regular file of the outputs not uploaded yet.
func (o *outputs) final() {
	if o.checkpoints {
		o.scan()
	}
	o.walk(".", 0, func(rel string) bool {
		return o.checkpoints && rel == artifacts.CheckpointsDir // reported as checkpoints only
	}, nil)
}

// scan reports each checkpoint that is complete (by the rules of
// domain.CheckpointMarker, as the local executor reads them) and new, or
// changed since it was reported: its changed files, then its marker, then
// the checkpoint-complete call. A checkpoint whose upload did not get
// through is tried again at the next scan.
func (o *outputs) scan() {
	found, err := o.dir.Checkpoints()
	if err != nil {
		o.localError(artifacts.CheckpointsDir, err)
		return
	}
	for _, c := range found {
		if !c.Complete {
			continue
		}
		sig := listSig{mod: c.ModTime, size: c.Size, files: c.Files}
		if prev, ok := o.listed[c.Name]; ok && prev == sig {
			continue
		}
		if o.report(c.Name) {
			o.listed[c.Name] = sig
		}
	}
}

// report uploads checkpoint name and calls checkpoint-complete; false
// means the API did not answer, to try again later.
func (o *outputs) report(name string) bool {
	rel := artifacts.CheckpointsDir + "/" + name
	fi, err := o.root.Lstat(rel)
	if err != nil {
		return true // gone meanwhile
	}
	var marker string
	if fi.IsDir() {
		marker = rel + "/" + domain.CheckpointMarker
	} else {
		marker = rel + domain.CheckpointMarker
	}
	changed, ok := false, true
	visit := func(p string, f *os.File, fi fs.FileInfo) {
		up, err := o.upload(p, f, fi)
		changed = changed || up
		if errors.Is(err, errUnavailable) {
			ok = false
		}
	}
	if fi.IsDir() {
		o.walk(rel, 0, func(p string) bool { return p == marker }, visit)
	} else {
		o.file(rel, visit)
	}
	if !ok {
		return false
	}
	// The marker last, when it is there (a Hugging Face checkpoint or a
	// whole zip is complete without one: the server writes it).
	sum := ""
	markerOK := true
	o.file(marker, func(p string, f *os.File, fi fs.FileInfo) {
		h := sha256.New()
		if _, err := io.Copy(h, io.NewSectionReader(f, 0, fi.Size())); err != nil {
			o.localError(p, err)
			markerOK = false
			return
		}
		sum = hex.EncodeToString(h.Sum(nil))
		if !changed && o.markers[name] == sum {
			return // touched, not rewritten
		}
		delete(o.sent, p) // a new version: sent again, whatever its size and time
		up, err := o.upload(p, f, fi)
		changed = changed || up
		if errors.Is(err, errUnavailable) {
			markerOK = false
		}
	})
	if !markerOK {
		return false
	}
	if _, seen := o.markers[name]; seen && !changed {
		return true // nothing new
	}
	err = o.rep.postJSON("checkpoints", "/checkpoints", apitypes.CheckpointComplete{Name: name})
	if errors.Is(err, errUnavailable) {
		return false
	}
	o.markers[name] = sum
	return true
}

// file calls fn with the regular file rel, opened, when it is one.
func (o *outputs) file(rel string, fn func(string, *os.File, fs.FileInfo)) {
	f, fi, err := o.open(rel)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, artifacts.ErrNotRegular) {
			o.localError(rel, err)
		}
		return
	}
	defer f.Close()
	fn(rel, f, fi)
}

// open opens rel for reading when it is a regular file and no link, and
// is still the file looked at once open.
func (o *outputs) open(rel string) (*os.File, fs.FileInfo, error) {
	lfi, err := o.root.Lstat(rel)
	if err != nil {
		return nil, nil, err
	}
	if !lfi.Mode().IsRegular() {
		return nil, nil, artifacts.ErrNotRegular
	}
	// O_NONBLOCK: a fifo swapped in meanwhile opens at once, and is refused.
	f, err := o.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || !os.SameFile(fi, lfi) {
		f.Close()
		return nil, nil, artifacts.ErrNotRegular
	}
	return f, fi, nil
}

// walk hands to each (nil: upload) every regular file below the directory
// rel, opened, in lexical order, except temporary files (.tmp*, *.tmp) and
// what skip names.
func (o *outputs) walk(rel string, depth int, skip func(string) bool, each func(string, *os.File, fs.FileInfo)) {
	if depth > maxDepth {
		o.localError(rel, errors.New("too deep; not uploaded"))
		return
	}
	lfi, err := o.root.Lstat(rel)
	if err != nil || !lfi.IsDir() {
		return
	}
	d, err := o.root.OpenFile(rel, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		o.localError(rel, err)
		return
	}
	fi, err := d.Stat()
	if err != nil || !os.SameFile(fi, lfi) {
		d.Close()
		return
	}
	ents, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		o.localError(rel, err)
		return
	}
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	for _, e := range ents {
		p := path.Join(rel, e.Name())
		if temporary(e.Name()) || (skip != nil && skip(p)) {
			continue
		}
		switch {
		case e.IsDir():
			o.walk(p, depth+1, skip, each)
		case e.Type().IsRegular():
			if each != nil {
				o.file(p, each)
			} else {
				o.file(p, func(p string, f *os.File, fi fs.FileInfo) { _, _ = o.upload(p, f, fi) })
			}
		}
	}
}

// temporary reports a name being written: .tmp* (the SDK's) or *.tmp.
func temporary(name string) bool {
	return strings.HasPrefix(name, ".tmp") || strings.HasSuffix(name, ".tmp")
}

// upload puts the open regular file f at output path rel, unless that
// very file was uploaded there already; uploaded reports a new upload.
func (o *outputs) upload(rel string, f *os.File, fi fs.FileInfo) (uploaded bool, err error) {
	sig := sigOf(fi)
	if prev, ok := o.sent[rel]; ok && prev == sig {
		return false, nil
	}
	url := o.rep.base + o.rep.outputPath(rel)
	err = o.rep.call("outputs", "PUT "+o.rep.outputPath(rel), func() (*http.Request, error) {
		// Its size now, at every try: a file that shrank while it was
		// sent is sent again whole.
		cur, err := f.Stat()
		if err != nil {
			return nil, err
		}
		var body io.Reader = http.NoBody
		if cur.Size() > 0 {
			body = io.NewSectionReader(f, 0, cur.Size())
		}
		req, err := http.NewRequest(http.MethodPut, url, body)
		if err != nil {
			return nil, err
		}
		req.ContentLength = cur.Size()
		req.Header.Set("Content-Type", "application/octet-stream")
		return req, nil
	})
	if err == nil || errors.Is(err, errRefused) {
		o.sent[rel] = sig // refused: sending it again would not help
	}
	return err == nil, err
}

// localError logs a problem reading the job's tree, once per path.
func (o *outputs) localError(rel string, err error) {
	if _, ok := o.local[rel]; ok {
		return
	}
	o.local[rel] = err
	o.log.printf("outputs: %s: %v", rel, err)
}
