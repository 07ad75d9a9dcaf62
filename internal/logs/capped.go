package logs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A log under a size limit keeps its head and a rolling tail. On disk, in
// the log's directory:
//
//	output.log           the head: the first lines, up to half the limit
//	output.log.cap       {"limit": BYTES}, written when the head is full
//	output.log.<offset>  tail segments of at most a quarter of the limit
//	                     each; <offset> is where the segment's first byte
//	                     would be in the whole, uncapped log
//
// The writer keeps at most two tail segments: when the newer one is full
// it deletes the older and starts a third. The files therefore never hold
// more than the limit (plus the few bytes of output.log.cap). What lies
// between the end of one file and the offset of the next was dropped;
// readers show one marker line there (see Marker), so a capped log reads
// as head, marker, tail. Every file holds whole lines only.

// MinLimit is the smallest log limit: a tail segment (a quarter of the
// limit) must hold the longest line the supervisor writes.
const MinLimit = 1 << 20

// capSuffix names the file that records the limit of a capped log.
const capSuffix = ".cap"

// CapReached reports whether the log at path reached its limit (its
// limit record exists), the limit it records (0 when unreadable) and when
// the record was written. It costs one stat, and one small read once the
// record exists.
func CapReached(path string) (limit int64, at time.Time, ok bool) {
	st, err := os.Stat(path + capSuffix)
	if err != nil {
		return 0, time.Time{}, false
	}
	return readCap(os.Open, path), st.ModTime(), true
}

// capRecord is the content of output.log.cap.
type capRecord struct {
	Limit int64 `json:"limit"`
}

// Writer appends whole lines to a log, keeping it under a size limit as
// described above. It is not safe for concurrent use.
type Writer struct {
	path  string
	limit int64 // 0: none

	head     *os.File
	headSize int64
	sealed   bool // the head is full; lines go to tail segments

	seg      *os.File // the current tail segment
	segStart int64    // its offset in the whole log
	segSize  int64
	prev     string // the older tail segment's path; "" when none
	written  int64  // bytes of the whole log so far
	dropped  int64  // bytes deleted with old tail segments
}

// Create opens the log at path for appending (creating it), to be kept
// under limit bytes (0: no limit; otherwise at least MinLimit).
func Create(path string, limit int64) (*Writer, error) {
	if limit != 0 && limit < MinLimit {
		return nil, fmt.Errorf("log limit %d is below the minimum of %d bytes", limit, MinLimit)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &Writer{path: path, limit: limit, head: f, headSize: st.Size(), written: st.Size()}, nil
}

// Dropped reports how many bytes of the log were deleted to keep it under
// its limit.
func (w *Writer) Dropped() int64 { return w.dropped }

// Limited reports whether the log reached its limit: its head is full and
// new lines go to the rolling tail.
func (w *Writer) Limited() bool { return w.sealed }

// Write appends p, which holds whole lines (a missing final newline is
// added by the next write, as if p ended the line).
func (w *Writer) Write(p []byte) (int, error) {
	n := len(p)
	if w.limit == 0 {
		_, err := w.head.Write(p)
		w.written += int64(n)
		return n, err
	}
	for len(p) > 0 {
		if !w.sealed {
			k := fitLines(p, w.limit/2-w.headSize)
			if k > 0 {
				if _, err := w.head.Write(p[:k]); err != nil {
					return n - len(p), err
				}
				w.headSize += int64(k)
				w.written += int64(k)
				p = p[k:]
				continue
			}
			if err := w.seal(); err != nil {
				return n - len(p), err
			}
		}
		segMax := w.limit / 4
		k := fitLines(p, segMax-w.segSize)
		if k == 0 && w.segSize == 0 {
			// One line longer than a whole segment: keep its start.
			end := bytes.IndexByte(p, '\n') + 1
			if end == 0 {
				end = len(p)
			}
			line := append(append([]byte(nil), p[:segMax-1]...), '\n')
			if _, err := w.seg.Write(line); err != nil {
				return n - len(p), err
			}
			w.segSize += int64(len(line))
			w.written += int64(end)
			w.dropped += int64(end - len(line))
			p = p[end:]
			continue
		}
		if k == 0 {
			if err := w.rotate(); err != nil {
				return n - len(p), err
			}
			continue
		}
		if _, err := w.seg.Write(p[:k]); err != nil {
			return n - len(p), err
		}
		w.segSize += int64(k)
		w.written += int64(k)
		p = p[k:]
	}
	return n, nil
}

// fitLines returns the length of the longest prefix of p made of whole
// lines that is at most room bytes long.
func fitLines(p []byte, room int64) int {
	if int64(len(p)) <= room {
		return len(p)
	}
	if room <= 0 {
		return 0
	}
	return bytes.LastIndexByte(p[:room], '\n') + 1
}

// seal ends the head: it records the limit and starts the first tail
// segment right after the head.
func (w *Writer) seal() error {
	b, _ := json.Marshal(capRecord{Limit: w.limit})
	tmp := w.path + capSuffix + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, w.path+capSuffix); err != nil {
		return err
	}
	w.sealed = true
	w.segStart, w.segSize = w.written, 0
	return w.openSegment()
}

// rotate deletes the older tail segment and starts a new one after the
// current one.
func (w *Writer) rotate() error {
	if w.prev != "" {
		if st, err := os.Stat(w.prev); err == nil {
			w.dropped += st.Size()
		}
		if err := os.Remove(w.prev); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	w.prev = w.seg.Name()
	if err := w.seg.Close(); err != nil {
		return err
	}
	w.segStart += w.segSize
	w.segSize = 0
	return w.openSegment()
}

func (w *Writer) openSegment() error {
	f, err := os.OpenFile(w.path+"."+strconv.FormatInt(w.segStart, 10), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	w.seg = f
	return nil
}

// Close closes the log's files.
func (w *Writer) Close() error {
	err := w.head.Close()
	if w.seg != nil {
		err = errors.Join(err, w.seg.Close())
	}
	return err
}

// segment is one tail segment of a capped log.
type segment struct {
	name  string
	start int64 // offset in the whole log
}

// segments picks the tail segments of the log named base out of the names
// of its directory, in order.
func segments(base string, names []string) []segment {
	var out []segment
	for _, n := range names {
		rest, ok := strings.CutPrefix(n, base+".")
		if !ok || rest == "" || strings.TrimLeft(rest, "0123456789") != "" {
			continue
		}
		off, err := strconv.ParseInt(rest, 10, 64)
		if err != nil {
			continue
		}
		out = append(out, segment{name: n, start: off})
	}
	slices.SortFunc(out, func(a, b segment) int { return int(min(max(a.start-b.start, -1), 1)) })
	return out
}

// MarkerPrefix starts the text of the marker line that stands for the
// lines dropped from a capped log.
const MarkerPrefix = "trainyard: log limit "

// Marker is the text of the marker line for dropped bytes of a log capped
// at limit bytes (0: unknown).
func Marker(limit, dropped int64) string {
	lim := ""
	if limit > 0 {
		lim = HumanSize(limit) + " "
	}
	return fmt.Sprintf("%sreached; %s dropped between here and the tail", MarkerPrefix+lim, HumanSize(dropped))
}

// isMarker reports whether line (a full log line) is a marker line. Only
// the supervisor and readers write "system" lines, never the job.
func isMarker(line []byte) bool {
	ts, stream, text, ok := splitLine(line)
	_ = ts
	return ok && string(stream) == System && bytes.HasPrefix(text, []byte(MarkerPrefix))
}

// HumanSize writes a byte count briefly: "512B", "1.5KiB", "1.2GiB",
// "100MiB".
func HumanSize(n int64) string {
	units := []string{"KiB", "MiB", "GiB", "TiB"}
	if n < 1<<10 {
		return strconv.FormatInt(n, 10) + "B"
	}
	v := float64(n)
	u := ""
	for _, s := range units {
		if v < 1<<10 {
			break
		}
		v /= 1 << 10
		u = s
	}
	s := strconv.FormatFloat(v, 'f', 1, 64)
	return strings.TrimSuffix(s, ".0") + u
}

// markerLine is the full marker line at time t.
func markerLine(t time.Time, limit, dropped int64) []byte {
	return AppendLine(nil, t, System, []byte(Marker(limit, dropped)))
}

// readCap reads the limit recorded for a capped log (0: unknown).
func readCap(open func(name string) (*os.File, error), base string) int64 {
	f, err := open(base + capSuffix)
	if err != nil {
		return 0
	}
	defer f.Close()
	b := make([]byte, 256)
	n, _ := f.Read(b)
	var r capRecord
	if json.Unmarshal(b[:n], &r) != nil {
		return 0
	}
	return r.Limit
}

// LogFiles lists the files of the log at path (head, tail segments and
// the limit record) that exist, for tests and tools.
func LogFiles(path string) ([]string, error) {
	ents, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	base := filepath.Base(path)
	var out []string
	for _, e := range ents {
		if n := e.Name(); n == base || n == base+capSuffix || len(segments(base, []string{n})) == 1 {
			out = append(out, filepath.Join(filepath.Dir(path), n))
		}
	}
	return out, nil
}
