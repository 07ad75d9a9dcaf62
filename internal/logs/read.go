package logs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"regexp"
	"time"
)

// TailOffset returns the offset in f at which its last n lines begin (0 when
// the file has n lines or fewer), counting only lines for which keep returns
// true (nil keeps all). It reads backwards in growing windows, so it costs
// about the size of the tail, not of the file.
func TailOffset(f *os.File, n int, keep func(line []byte) bool) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := st.Size()
	if n <= 0 {
		return size, nil
	}
	for window := int64(32 << 10); ; window *= 4 {
		start := max(size-window, 0)
		buf := make([]byte, size-start)
		if _, err := f.ReadAt(buf, start); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		// Walk complete lines from the end; the first line of a window that
		// does not start the file may be partial, so it is never counted.
		end := len(buf)
		count := 0
		for end > 0 {
			nl := bytes.LastIndexByte(buf[:end-1], '\n')
			if nl < 0 && start > 0 {
				break // partial first line: widen the window
			}
			line := buf[nl+1 : end]
			if keep == nil || keep(line) {
				count++
				if count == n {
					return start + int64(nl+1), nil
				}
			}
			end = nl + 1
		}
		if start == 0 {
			return 0, nil
		}
	}
}

// Options says how to copy a log.
type Options struct {
	Tail   int  // only the last Tail lines (0: all)
	Follow bool // keep copying new lines until Done reports true
	// Timestamps keeps the full record: "<time> <stream> " prefixes and the
	// supervisor's "system" lines. Without it only the program's own output
	// (stdout and stderr text) is written.
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

// keep returns the line filter the options ask for (nil: every line). Tail
// counts only kept lines, so a tail of a filtered log is the tail of the
// filtered lines.
func (o Options) keep() func(line []byte) bool {
	if o.Timestamps && o.Grep == nil && o.Since.IsZero() {
		return nil
	}
	return func(b []byte) bool {
		ln := ParseLine(b)
		switch {
		case !o.Timestamps && ln.Stream == System:
			return false
		case !o.Since.IsZero() && (ln.Stream == "" || ln.Time.Before(o.Since)):
			return false
		case o.Grep != nil && !o.Grep.MatchString(ln.Text):
			return false
		}
		return true
	}
}

// Copy writes the log at path to w, formatted per opts. A missing file is an
// empty log while following (the attempt may not have started yet) and
// fs.ErrNotExist otherwise. The log is opened as OpenFile does.
func Copy(ctx context.Context, w io.Writer, path string, opts Options) error {
	return copyLog(ctx, w, func() (*os.File, error) { return OpenFile(path) }, opts)
}

// CopyLog writes the log of one attempt to w, as Copy does; it is opened
// as OpenLog does.
func (l Layout) CopyLog(ctx context.Context, w io.Writer, jobID int64, attempt int, opts Options) error {
	return copyLog(ctx, w, func() (*os.File, error) { return l.OpenLog(jobID, attempt) }, opts)
}

func copyLog(ctx context.Context, w io.Writer, open func() (*os.File, error), opts Options) error {
	if opts.Poll <= 0 {
		opts.Poll = 100 * time.Millisecond
	}
	var f *os.File
	for {
		var err error
		f, err = open()
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) || !opts.Follow {
			return err
		}
		if opts.Done != nil && opts.Done() {
			if f, err = open(); err != nil {
				return nil // ended without ever writing a log
			}
			break
		}
		if err := wait(ctx, opts.Poll); err != nil {
			return nil
		}
	}
	defer f.Close()
	keep := opts.keep()
	if opts.Tail > 0 {
		off, err := TailOffset(f, opts.Tail, keep)
		if err != nil {
			return err
		}
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return err
		}
	}
	r := bufio.NewReaderSize(f, 64<<10)
	bw := bufio.NewWriterSize(w, 32<<10)
	var partial []byte
	for {
		line, err := r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			partial = append(partial, line...)
			continue
		}
		if len(line) > 0 && err == nil {
			if len(partial) > 0 {
				line = append(partial, line...)
				partial = partial[:0]
			}
			if keep != nil && !keep(line) {
				continue
			}
			if werr := writeLine(bw, line, opts.Timestamps); werr != nil {
				return werr
			}
			continue
		}
		// EOF: keep an unterminated tail for the next read.
		partial = append(partial, line...)
		if err := bw.Flush(); err != nil {
			return err
		}
		if opts.Flush != nil {
			opts.Flush()
		}
		if !opts.Follow {
			if len(partial) > 0 && (keep == nil || keep(partial)) {
				return writeLine(w, partial, opts.Timestamps)
			}
			return nil
		}
		if opts.Done != nil && opts.Done() {
			opts.Follow = false // one more pass reads what was written before the end
			continue
		}
		if err := wait(ctx, opts.Poll); err != nil {
			return nil
		}
	}
}

func writeLine(w io.Writer, line []byte, timestamps bool) error {
	if !timestamps {
		ln := ParseLine(line)
		if ln.Stream == System {
			return nil
		}
		if ln.Stream != "" {
			line = append([]byte(ln.Text), '\n')
		}
	}
	if !bytes.HasSuffix(line, []byte("\n")) {
		line = append(line, '\n')
	}
	_, err := w.Write(line)
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

// Tail returns the last n lines of the log at path, text only. The log is
// opened as OpenFile does.
func Tail(path string, n int) ([]Line, error) {
	f, err := OpenFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return tail(f, n)
}

// TailLog returns the last n lines of the log of one attempt, as Tail
// does; it is opened as OpenLog does.
func (l Layout) TailLog(jobID int64, attempt, n int) ([]Line, error) {
	f, err := l.OpenLog(jobID, attempt)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return tail(f, n)
}

func tail(f *os.File, n int) ([]Line, error) {
	off, err := TailOffset(f, n, nil)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.NewSectionReader(f, off, 1<<30))
	if err != nil {
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
