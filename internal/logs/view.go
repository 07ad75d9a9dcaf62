package logs

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// source is where a log's files are: a directory and the head's name.
type source struct {
	base string                              // the head's file name
	open func(name string) (*os.File, error) // opens a file of the directory
	list func() ([]string, error)            // names in the directory
}

// pathSource reads the log at path (see OpenFile).
func pathSource(path string) source {
	dir := filepath.Dir(path)
	return source{
		base: filepath.Base(path),
		open: func(name string) (*os.File, error) { return OpenFile(filepath.Join(dir, name)) },
		list: func() ([]string, error) { return readDirNames(os.Open(dir)) },
	}
}

// attemptSource reads one attempt's log inside the layout's root (see
// Layout.Open).
func (l Layout) attemptSource(jobID int64, attempt int) source {
	dir := filepath.Join(strconv.FormatInt(jobID, 10), strconv.Itoa(attempt))
	return source{
		base: logName,
		open: func(name string) (*os.File, error) { return l.open(filepath.Join(dir, name)) },
		list: func() ([]string, error) {
			root, err := os.OpenRoot(l.Root)
			if err != nil {
				return nil, err
			}
			defer root.Close()
			return readDirNames(root.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0))
		},
	}
}

func readDirNames(f *os.File, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// part is a piece of a view: a range of one file, or a marker line.
type part struct {
	f      *os.File // nil for a marker
	mem    []byte   // the marker line
	gap    int64    // the bytes a marker stands for
	off    int64    // where the range starts in f
	size   int64
	vstart int64 // where the part starts in the view
}

// view presents the files of a log, from one offset of the whole log on,
// as one stream of lines: the head, a marker line wherever bytes were
// dropped, the tail segments. Sizes are those seen when it was built.
type view struct {
	parts []part
	size  int64 // bytes in the view
	end   int64 // offset in the whole log at the end of the view
	gap   bool  // the view starts with a marker
	files []*os.File
}

func (v *view) close() {
	for _, f := range v.files {
		f.Close()
	}
}

// ReadAt reads the view's bytes.
func (v *view) ReadAt(p []byte, off int64) (int, error) {
	n := 0
	for i := range v.parts {
		pt := &v.parts[i]
		if off+int64(n) >= pt.vstart+pt.size || len(p) == n {
			continue
		}
		if off+int64(n) < pt.vstart {
			break
		}
		rel := off + int64(n) - pt.vstart
		want := min(int64(len(p)-n), pt.size-rel)
		if pt.f == nil {
			n += copy(p[n:n+int(want)], pt.mem[rel:])
			continue
		}
		m, err := pt.f.ReadAt(p[n:n+int(want)], pt.off+rel)
		n += m
		if err != nil && !errors.Is(err, io.EOF) {
			return n, err
		}
		if int64(m) < want {
			return n, io.ErrUnexpectedEOF // the file shrank
		}
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// errRetry: a file of the log went away while the view was built.
var errRetry = errors.New("log file rotated")

// openView builds the view of the log from offset from of the whole log.
// A missing head is fs.ErrNotExist.
func (s source) openView(from int64) (*view, error) {
	for range 10 {
		v, err := s.buildView(from)
		if !errors.Is(err, errRetry) {
			return v, err
		}
	}
	return s.buildView(from)
}

func (s source) buildView(from int64) (*view, error) {
	v := &view{}
	ok := false
	defer func() {
		if !ok {
			v.close()
		}
	}()
	// Segments before the head: a head opened first could be followed
	// by segments listed later that make it look sealed too early, but
	// never the other way round.
	var segs []segment
	if names, err := s.list(); err == nil {
		segs = segments(s.base, names)
	}
	head, err := s.open(s.base)
	if err != nil {
		return nil, err
	}
	v.files = append(v.files, head)
	st, err := head.Stat()
	if err != nil {
		return nil, err
	}
	type piece struct {
		f     *os.File
		start int64 // in the whole log
		size  int64
	}
	pieces := []piece{{head, 0, st.Size()}}
	for _, sg := range segs {
		f, err := s.open(sg.name)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, errRetry
		}
		if err != nil {
			return nil, err
		}
		v.files = append(v.files, f)
		st, err := f.Stat()
		if err != nil {
			return nil, err
		}
		pieces = append(pieces, piece{f, sg.start, st.Size()})
	}
	limit := int64(-1)
	pos := from
	for _, pc := range pieces {
		if pc.start+pc.size <= pos && !(pc.size == 0 && pc.start > pos) {
			continue
		}
		if pc.start > pos {
			if limit < 0 {
				limit = readCap(s.open, s.base)
			}
			m := markerLine(firstTime(pc.f, pc.size), limit, pc.start-pos)
			if v.size == 0 {
				v.gap = true
			}
			v.parts = append(v.parts, part{mem: m, gap: pc.start - pos, size: int64(len(m)), vstart: v.size})
			v.size += int64(len(m))
			pos = pc.start
		}
		if n := pc.start + pc.size - pos; n > 0 {
			v.parts = append(v.parts, part{f: pc.f, off: pos - pc.start, size: n, vstart: v.size})
			v.size += n
			pos += n
		}
	}
	v.end = pos
	ok = true
	return v, nil
}

// firstTime is the time of the first line of f: the time of a marker
// before it. A segment without a line yet was just started: now.
func firstTime(f *os.File, size int64) time.Time {
	b := make([]byte, len(TimeFormat))
	if size < int64(len(b)) {
		return time.Now()
	}
	if _, err := f.ReadAt(b, 0); err != nil {
		return time.Now()
	}
	t, err := time.Parse(TimeFormat, string(b))
	if err != nil {
		return time.Now()
	}
	return t
}

// LogLimited reports whether the log of one attempt reached its limit
// (ok), the limit (0 when unknown) and how many bytes were dropped so far.
func (l Layout) LogLimited(jobID int64, attempt int) (limit, dropped int64, ok bool) {
	src := l.attemptSource(jobID, attempt)
	f, err := src.open(logName + capSuffix)
	if err != nil {
		return 0, 0, false
	}
	f.Close()
	limit = readCap(src.open, logName)
	if v, err := src.openView(0); err == nil {
		for _, pt := range v.parts {
			if pt.f == nil {
				dropped += pt.gap
			}
		}
		v.close()
	}
	return limit, dropped, true
}
