package logs

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"regexp"
	"runtime"
	"slices"
	"sync"
	"time"
)

// Reading costs. A log is read in chunks of readChunk bytes straight from
// the files (no line-by-line buffering), and lines are filtered on their
// bytes: no timestamp is parsed, nothing is allocated per line.
//
//   - --tail N reads backwards from the end and stops at the N-th line:
//     it costs the size of those lines, whatever the log's size.
//   - --grep with --tail N reads backwards too and stops at the N-th
//     match: it costs the bytes after that match (the whole log when
//     there are fewer than N matches).
//   - --grep alone reads the whole log once. When every match holds one
//     of a few literals (`checkpoint`, `loss=[0-9]`, `(?i)Checkpoint`,
//     `loss|nan`, `(?i)error|warn`: see requiredLiterals), the chunks are
//     searched for them and only the lines that hold one are looked at,
//     which runs at about memory speed. Where several such sets are
//     required (`step \d+ .*nan`: "step " and "nan"), each chunk is
//     searched for the one that the fewest lines of its start hold, and a
//     line is checked for the others before the expression runs. An
//     expression that is, for finding a match, an alternation of byte
//     patterns (runs of a class that the next byte ends included), or of
//     such patterns in turn with gaps between (`loss|nan`, `step [0-9]+`,
//     `\d{4}`, `\bnan\b`, `loss.*tokens`, `loss \d+\.\d+ lr`: see
//     exact), is decided on a line's text without running it; other
//     expressions are run on each line that may match (every line when
//     no literal is rare: about 4 cpu-s/GiB on training logs, as
//     `lr (\d+\.)+\d+ tokens`). On more than one core, the two halves of
//     each chunk are filtered at once (copier.lines).
//   - --since finds its first line by binary search on the timestamps
//     (they never decrease through a log), then reads forwards from there.
const readChunk = 1 << 20

// Options says how to copy a log.
type Options struct {
	Tail   int  // only the last Tail lines (0: all)
	Follow bool // keep copying new lines until Done reports true
	// Timestamps keeps the full record: "<time> <stream> " prefixes and the
	// supervisor's "system" lines. Without it only the program's own output
	// (stdout and stderr text) is written, and the marker of dropped lines.
	Timestamps bool
	// Done reports whether the writer of the log has finished (the attempt
	// ended). Checked only when following.
	Done func() bool
	// Poll is how often to look for new lines while following (default 100ms).
	Poll time.Duration
	// Flush, if set, is called after each batch of lines (HTTP streaming).
	Flush func()
	// Grep, if set, keeps only the lines whose text (without time and
	// stream) it matches.
	Grep *regexp.Regexp
	// Since, if not zero, keeps only the lines written at or after it;
	// lines without a timestamp are dropped.
	Since time.Time
}

// filter is the line filter of a set of options, on line bytes.
type filter struct {
	all        bool // every line is kept
	timestamps bool // system lines are kept
	grep       *regexp.Regexp
	sets       []litSet  // sets of literals every grep match holds one of each of
	finds      []*finder // per set, its finder
	lits       litSet    // the set searched for (choose); nil: none
	checks     []litSet  // the sets a line is checked for before grep runs
	find       *finder   // searches chunks for lits; nil: none
	exact      *exact    // decides grep matches without running it; nil: none
	anchored   *anchored // runs grep only where its leading literal is; nil: none
	since      []byte    // the since time in TimeFormat; nil: none
}

func (o Options) filter() *filter {
	f := &filter{timestamps: o.Timestamps, grep: o.Grep}
	f.all = o.Timestamps && o.Grep == nil && o.Since.IsZero()
	f.sets = requiredSets(o.Grep)
	for _, s := range f.sets {
		f.finds = append(f.finds, newFinder(s))
	}
	if len(f.sets) > 0 {
		f.lits, f.find = f.sets[0], f.finds[0]
	}
	f.checks = slices.Clone(f.sets)
	f.exact = newExact(o.Grep)
	if f.exact == nil {
		f.anchored = newAnchored(o.Grep)
	}
	if !o.Since.IsZero() {
		f.since = []byte(o.Since.UTC().Format(TimeFormat))
	}
	return f
}

// splitLine splits a log line (with or without its newline) into its
// time, stream and text, as ParseLine does but without parsing the time:
// ok is false for a line without the format.
func splitLine(b []byte) (ts, stream, text []byte, ok bool) {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	if len(b) <= len(TimeFormat) || b[len(TimeFormat)] != ' ' || !timeShape(b[:len(TimeFormat)]) {
		return nil, nil, b, false
	}
	rest := b[len(TimeFormat)+1:]
	sp := len(Stdout) // the streams' length, looked at first
	if len(rest) <= sp || rest[sp] != ' ' || !noSpace(rest[:sp]) {
		sp = bytes.IndexByte(rest, ' ')
	}
	if sp < 0 {
		return b[:len(TimeFormat)], rest, nil, true
	}
	return b[:len(TimeFormat)], rest[:sp], rest[sp+1:], true
}

func noSpace(b []byte) bool {
	for _, c := range b {
		if c == ' ' {
			return false
		}
	}
	return true
}

// timeShape reports whether b looks like a time in TimeFormat: eight
// bytes at a time (it runs on every line a filter looks at).
func timeShape(b []byte) bool {
	if len(b) != len(TimeFormat) {
		return false
	}
	for k, at := range timeWords {
		w := binary.LittleEndian.Uint64(b[at:])
		m := timeMasks[k]
		if w&m.sep != m.sepVal {
			return false
		}
		d := (w ^ 0x3030303030303030) & m.digit // digits: 0 to 9
		if ((d&0x7f7f7f7f7f7f7f7f)+0x7676767676767676|d)&0x8080808080808080&m.digit != 0 {
			return false
		}
	}
	return true
}

// timeWords are the offsets of the eight-byte words timeShape reads (the
// last overlaps the third); timeMasks, per word, the separators' bytes,
// their values and the digits' bytes.
var timeWords = [4]int{0, 8, 16, len(TimeFormat) - 8}

var timeMasks = func() (m [4]struct{ sep, sepVal, digit uint64 }) {
	for k, at := range timeWords {
		for i := range 8 {
			c := TimeFormat[at+i]
			if '0' <= c && c <= '9' {
				m[k].digit |= 0xff << (8 * i)
			} else {
				m[k].sep |= 0xff << (8 * i)
				m[k].sepVal |= uint64(c) << (8 * i)
			}
		}
	}
	return m
}()

// counted reports whether the filter keeps line and it counts towards a
// tail: marker lines are kept whatever the grep, so a filtered capped log
// still says where it lost lines, but never counted.
func (f *filter) counted(line []byte) bool {
	if f.all {
		return !isMarker(line)
	}
	keep, marker, _, _ := f.check(line, -1)
	return keep && !marker
}

// check reports whether the filter keeps line, whether it is a marker
// line (then always kept) and, unless the filter keeps every line, the
// line's text and whether the line has the format (splitLine). hit, if
// not -1, is where in line the finder found a literal: where a match of
// the expression may well start.
func (f *filter) check(line []byte, hit int) (keep, marker bool, text []byte, ok bool) {
	if f.all {
		return true, false, nil, false
	}
	ts, stream, text, ok := splitLine(line)
	if f.since != nil && (!ok || bytes.Compare(ts, f.since) < 0) {
		return false, false, text, ok
	}
	if ok && string(stream) == System {
		if bytes.HasPrefix(text, []byte(MarkerPrefix)) {
			return true, true, text, ok
		}
		if !f.timestamps {
			return false, false, text, ok
		}
	}
	if f.grep != nil {
		if f.exact != nil && hit >= 0 {
			n := len(line)
			if n > 0 && line[n-1] == '\n' {
				n--
			}
			if at := hit - (n - len(text)); at >= 0 && f.exact.matchAt(text, at) {
				return true, false, text, ok
			}
		}
		return f.match(text), false, text, ok
	}
	return true, false, text, ok
}

// appendLine appends line (with its newline, except perhaps the log's
// last) to out as written, if the filter keeps it: its text and newline
// unless timestamps are kept. hit is as for check.
func (f *filter) appendLine(out, line []byte, hit int) []byte {
	keep, _, text, ok := f.check(line, hit)
	if !keep {
		return out
	}
	n := len(line)
	if !f.timestamps && ok {
		if n > 0 && line[n-1] == '\n' { // text and newline
			return append(out, line[n-1-len(text):]...)
		}
		return append(append(out, text...), '\n')
	}
	out = append(out, line...)
	if n == 0 || line[n-1] != '\n' {
		out = append(out, '\n')
	}
	return out
}

// appendLines appends to out the kept lines of b, which holds whole
// lines, as written.
func (f *filter) appendLines(out, b []byte) []byte {
	if f.all {
		return append(out, b...)
	}
	if f.find == nil {
		return f.appendEach(out, b)
	}
	// Only lines holding a literal can be kept (markers are never in the
	// files: views add them). When the literal is on nearly every line
	// (loss|nan in a training log), searching for it only adds to the cost
	// of each line: after denseRun lines in a row that hold it, the rest of
	// the chunk is read line by line.
	f.choose(b)
	f.find.reset(b)
	run := 0
	for from := 0; from < len(b); {
		if run == denseRun {
			return f.appendEach(out, b[from:])
		}
		i := f.find.index(from)
		if i < 0 {
			return out
		}
		start := lineStart(b, from, i)
		if start == from {
			run++
		} else {
			run = 0
		}
		end := len(b)
		if nl := bytes.IndexByte(b[i:], '\n'); nl >= 0 {
			end = i + nl + 1
		}
		out = f.appendLine(out, b[start:end], i-start)
		from = end
	}
	return out
}

// denseRun is how many consecutive lines holding a literal make a chunk's
// search for it stop (filter.appendLines).
const denseRun = 64

// appendEach is appendLines looking at each line.
func (f *filter) appendEach(out, b []byte) []byte {
	for len(b) > 0 {
		nl := bytes.IndexByte(b, '\n') + 1
		if nl == 0 {
			nl = len(b)
		}
		out = f.appendLine(out, b[:nl], -1)
		b = b[nl:]
	}
	return out
}

// clone returns a filter like f for another goroutine: the finders'
// state is its own.
func (f *filter) clone() *filter {
	g := *f
	g.checks = slices.Clone(f.checks)
	g.finds = nil
	for k, s := range f.sets {
		g.finds = append(g.finds, newFinder(s))
		if f.find == f.finds[k] {
			g.find = g.finds[k]
		}
	}
	return &g
}

// chooseSample is how many bytes of a chunk choose counts lines in;
// freqSample, bytes.
const (
	chooseSample = 16 << 10
	freqSample   = 4 << 10
)

// choose makes the filter search chunk b for the set of literals that the
// fewest lines hold at its start (each is required, so any finds every
// line that may match, the rarest the fewest), each literal as its byte
// rarest there. Where grep runs, a line is checked only for the sets that
// not every line there holds: a check that never fails only adds to the
// cost, and grep decides anyway.
func (f *filter) choose(b []byte) {
	if f.find == nil {
		return
	}
	var freq [256]int
	fs := b[:min(len(b), freqSample)]
	for _, c := range fs {
		freq[c]++
	}
	for _, find := range f.finds {
		find.tune(&freq, len(fs))
	}
	if len(f.sets) < 2 && f.exact != nil {
		return
	}
	sample := b[:min(len(b), chooseSample)]
	if nl := bytes.LastIndexByte(sample, '\n'); nl >= 0 {
		sample = sample[:nl+1]
	}
	lines := max(bytes.Count(sample, []byte{'\n'}), 1)
	best, fewest := 0, lines+1
	f.checks = f.checks[:0]
	for k, find := range f.finds {
		limit := fewest // only the rarest matters
		if f.exact == nil {
			limit = lines + 1
		}
		n := find.lines(sample, limit)
		if n < fewest {
			best, fewest = k, n
		}
		if n < lines {
			f.checks = append(f.checks, f.sets[k])
		}
	}
	f.lits, f.find = f.sets[best], f.finds[best]
}

// match reports whether grep matches text.
func (f *filter) match(text []byte) bool {
	if e := f.exact; e != nil { // e.match, a call less
		return e.alts.match(text) || e.chains != nil && e.matchChains(text)
	}
	for _, s := range f.checks {
		if !s.in(text) {
			return false
		}
	}
	if f.anchored != nil {
		return f.anchored.match(text)
	}
	return f.grep.Match(text)
}

// tailStart returns the offset in r (size bytes) at which its last n kept
// lines begin (0 when it has n or fewer). It reads backwards in chunks and
// stops at the n-th line.
func tailStart(r io.ReaderAt, size int64, n int, f *filter) (int64, error) {
	if n <= 0 {
		return size, nil
	}
	count := 0
	hi := size               // the bytes from hi on are counted
	chunk := int64(32 << 10) // a short tail is read quickly; then longer reads
	var buf []byte
	var starts []int
	for hi > 0 {
		lo := max(hi-chunk, 0)
		if int64(cap(buf)) < hi-lo {
			buf = make([]byte, hi-lo)
		}
		b := buf[:hi-lo]
		if _, err := r.ReadAt(b, lo); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		// Complete lines start after the first newline of the chunk,
		// unless the chunk starts the log.
		first := 0
		if lo > 0 {
			first = bytes.IndexByte(b, '\n') + 1
			if first == 0 {
				chunk *= 2 // one line longer than the chunk
				continue
			}
		}
		// The starts of the lines that may be kept, in order. Markers
		// are never counted: they are in the output when the tail spans
		// them.
		f.choose(b[first:])
		starts = candidates(b[first:], f.find, starts[:0])
		for i := len(starts) - 1; i >= 0; i-- {
			s := first + starts[i]
			e := bytes.IndexByte(b[s:], '\n') + 1 + s
			if e == s { // the log's last line, unterminated
				e = len(b)
			}
			if f.counted(b[s:e]) {
				if count++; count == n {
					return lo + int64(s), nil
				}
			}
		}
		hi = lo + int64(first)
		chunk = min(chunk*2, readChunk)
	}
	return 0, nil
}

// candidates appends to starts the offsets in b of the lines that hold a
// literal of find (every line when find is nil), in order. b starts a line.
func candidates(b []byte, find *finder, starts []int) []int {
	if find == nil {
		for i := 0; i < len(b); {
			starts = append(starts, i)
			nl := bytes.IndexByte(b[i:], '\n')
			if nl < 0 {
				break
			}
			i += nl + 1
		}
		return starts
	}
	find.reset(b)
	for i := 0; i < len(b); {
		j := find.index(i)
		if j < 0 {
			break
		}
		starts = append(starts, lineStart(b, i, j))
		nl := bytes.IndexByte(b[j:], '\n')
		if nl < 0 {
			break
		}
		i = j + nl + 1
	}
	return starts
}

// lineStart returns the start of the line of b holding offset i, where a
// line starts at from <= i. A near start is searched for forwards, which
// is quicker than backwards.
func lineStart(b []byte, from, i int) int {
	if i-from > 256 {
		return from + bytes.LastIndexByte(b[from:i], '\n') + 1
	}
	for {
		j := bytes.IndexByte(b[from:i], '\n')
		if j < 0 {
			return from
		}
		from += j + 1
	}
}

// sinceStart returns an offset of r at which a line starts and before
// which no line was written at or after since: a binary search on line
// timestamps, which never decrease through a log. Lines without a
// timestamp are passed over; where the search cannot narrow further, the
// scan from the result simply reads a little more.
func sinceStart(r io.ReaderAt, size int64, since []byte) (int64, error) {
	lo, hi := int64(0), size // line starts; the first line at or after since is in [lo, hi]
	buf := make([]byte, 64<<10)
	for hi-lo > int64(len(buf)) {
		mid := lo + (hi-lo)/2
		n, err := r.ReadAt(buf, mid)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		b := buf[:n]
		oldLo, oldHi := lo, hi
		for i := bytes.IndexByte(b, '\n') + 1; i > 0 && mid+int64(i) < hi; {
			j := bytes.IndexByte(b[i:], '\n')
			if j < 0 {
				break
			}
			if ts, _, _, ok := splitLine(b[i : i+j]); ok {
				if bytes.Compare(ts, since) < 0 {
					lo = mid + int64(i+j+1)
				} else {
					hi = mid + int64(i)
				}
				break
			}
			i += j + 1
		}
		if lo == oldLo && hi == oldHi {
			break
		}
	}
	return lo, nil
}

// Copy writes the log at path to w, formatted per opts. A missing file is an
// empty log while following (the attempt may not have started yet) and
// fs.ErrNotExist otherwise. The log's files are opened as OpenFile does.
func Copy(ctx context.Context, w io.Writer, path string, opts Options) error {
	return copyLog(ctx, w, pathSource(path), opts)
}

// CopyLog writes the log of one attempt to w, as Copy does; its files are
// opened as OpenLog does.
func (l Layout) CopyLog(ctx context.Context, w io.Writer, jobID int64, attempt int, opts Options) error {
	return copyLog(ctx, w, l.attemptSource(jobID, attempt), opts)
}

func copyLog(ctx context.Context, w io.Writer, src source, opts Options) error {
	if opts.Poll <= 0 {
		opts.Poll = 100 * time.Millisecond
	}
	var v *view
	for {
		var err error
		v, err = src.openView(0)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) || !opts.Follow {
			return err
		}
		if opts.Done != nil && opts.Done() {
			if v, err = src.openView(0); err != nil {
				return nil // ended without ever writing a log
			}
			break
		}
		if err := wait(ctx, opts.Poll); err != nil {
			return nil
		}
	}
	f := opts.filter()
	c := newCopier(w, f)
	var start int64
	var err error
	switch {
	case opts.Tail > 0:
		start, err = tailStart(v, v.size, opts.Tail, f)
	case f.since != nil:
		start, err = sinceStart(v, v.size, f.since)
	}
	if err != nil {
		v.close()
		return err
	}
	for {
		err := c.copy(v, start)
		end := v.end
		v.close()
		if err != nil {
			return err
		}
		if err := c.w.Flush(); err != nil {
			return err
		}
		if opts.Flush != nil {
			opts.Flush()
		}
		if !opts.Follow {
			if err := c.flushPartial(); err != nil {
				return err
			}
			return c.w.Flush()
		}
		if opts.Done != nil && opts.Done() {
			opts.Follow = false // one more pass reads what was written before the end
		} else if err := wait(ctx, opts.Poll); err != nil {
			return nil
		}
		if v, err = src.openView(end); err != nil {
			return err
		}
		start = 0
	}
}

// copier writes the kept lines of views, in order.
type copier struct {
	w       *bufio.Writer
	f       *filter
	half    *filter // filters the second half of a long run of lines; nil: none
	partial []byte  // an unterminated last line, completed by the next view
	buf     []byte
	out     []byte // the kept lines of a chunk, as written
	out2    []byte // those of its second half
}

// halfMin is the fewest bytes of lines filtered on two cores at once:
// the second half's goroutine costs about a microsecond.
const halfMin = 256 << 10

func newCopier(w io.Writer, f *filter) *copier {
	c := &copier{w: bufio.NewWriterSize(w, 32<<10), f: f}
	if !f.all && runtime.GOMAXPROCS(0) > 1 {
		c.half = f.clone()
	}
	return c
}

// copy writes the kept lines of v from offset start to its end.
func (c *copier) copy(v *view, start int64) error {
	if v.gap {
		// The rest of the line read last was dropped with the gap (the
		// view's marker says so): written now it would be a torn line.
		c.partial = c.partial[:0]
	}
	for _, pt := range v.parts {
		from := max(start-pt.vstart, 0)
		if from >= pt.size {
			continue
		}
		if pt.f == nil {
			if err := c.line(pt.mem); err != nil {
				return err
			}
			continue
		}
		if err := c.copyRange(pt.f, pt.off+from, pt.off+pt.size); err != nil {
			return err
		}
	}
	return nil
}

// copyRange writes the kept lines of r's bytes [off, end). Where both
// halves of a chunk are filtered at once, chunks are twice as long.
func (c *copier) copyRange(r io.ReaderAt, off, end int64) error {
	if c.buf == nil {
		n := readChunk
		if c.half != nil {
			n *= 2
		}
		c.buf = make([]byte, n)
	}
	for off < end {
		n, err := r.ReadAt(c.buf[:min(int64(len(c.buf)), end-off)], off)
		if n == 0 && err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		b := c.buf[:n]
		off += int64(n)
		if len(c.partial) > 0 {
			nl := bytes.IndexByte(b, '\n')
			if nl < 0 {
				c.partial = append(c.partial, b...)
				continue
			}
			c.partial = append(c.partial, b[:nl+1]...)
			if err := c.line(c.partial); err != nil {
				return err
			}
			c.partial = c.partial[:0]
			b = b[nl+1:]
		}
		last := bytes.LastIndexByte(b, '\n') + 1
		if err := c.lines(b[:last]); err != nil {
			return err
		}
		c.partial = append(c.partial, b[last:]...)
	}
	return nil
}

// lines writes the kept lines of b, which holds whole lines. A long b is
// filtered in two halves at once, split at a line's end, and written in
// order.
func (c *copier) lines(b []byte) error {
	if c.f.all {
		_, err := c.w.Write(b)
		return err
	}
	if c.half == nil || len(b) < halfMin {
		c.out = c.f.appendLines(c.out[:0], b)
		_, err := c.w.Write(c.out)
		return err
	}
	mid := len(b) / 2
	mid += bytes.IndexByte(b[mid:], '\n') + 1 // b ends a line
	var wg sync.WaitGroup
	wg.Go(func() { c.out2 = c.half.appendLines(c.out2[:0], b[mid:]) })
	c.out = c.f.appendLines(c.out[:0], b[:mid])
	wg.Wait()
	if _, err := c.w.Write(c.out); err != nil {
		return err
	}
	_, err := c.w.Write(c.out2)
	return err
}

// line writes line (with its newline, except perhaps the log's last) if
// the filter keeps it.
func (c *copier) line(line []byte) error {
	c.out = c.f.appendLine(c.out[:0], line, -1)
	_, err := c.w.Write(c.out)
	return err
}

// flushPartial writes an unterminated last line as a line.
func (c *copier) flushPartial() error {
	if len(c.partial) == 0 {
		return nil
	}
	err := c.line(c.partial)
	c.partial = c.partial[:0]
	return err
}

func wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Tail returns the last n lines of the log at path, text only. The log's
// files are opened as OpenFile does.
func Tail(path string, n int) ([]Line, error) {
	return tail(pathSource(path), n)
}

// TailLog returns the last n lines of the log of one attempt, as Tail
// does; its files are opened as OpenLog does.
func (l Layout) TailLog(jobID int64, attempt, n int) ([]Line, error) {
	return tail(l.attemptSource(jobID, attempt), n)
}

func tail(src source, n int) ([]Line, error) {
	v, err := src.openView(0)
	if err != nil {
		return nil, err
	}
	defer v.close()
	off, err := tailStart(v, v.size, n, &filter{all: true})
	if err != nil {
		return nil, err
	}
	data := make([]byte, v.size-off)
	if _, err := v.ReadAt(data, off); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	var out []Line
	for _, l := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		if len(l) > 0 {
			out = append(out, ParseLine(l))
		}
	}
	return out, nil
}
