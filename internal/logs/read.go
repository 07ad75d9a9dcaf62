package logs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"time"
)

// TailOffset returns the offset in f at which its last n lines begin (0 when
// the file has n lines or fewer). It reads backwards in blocks, so it costs
// the size of the tail, not of the file.
func TailOffset(f *os.File, n int) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := st.Size()
	if n <= 0 {
		return size, nil
	}
	const block = 32 << 10
	buf := make([]byte, block)
	end := size
	// A trailing newline ends the last line; it does not start a new one.
	newlines := 0
	skipLast := true
	for end > 0 {
		start := max(end-block, 0)
		chunk := buf[:end-start]
		if _, err := f.ReadAt(chunk, start); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		for i := len(chunk) - 1; i >= 0; i-- {
			if chunk[i] != '\n' {
				skipLast = false
				continue
			}
			if skipLast && start+int64(i) == size-1 {
				continue
			}
			newlines++
			if newlines == n {
				return start + int64(i) + 1, nil
			}
		}
		end = start
	}
	return 0, nil
}

// Options says how to copy a log.
type Options struct {
	Tail       int  // only the last Tail lines (0: all)
	Follow     bool // keep copying new lines until Done reports true
	Timestamps bool // keep "<time> <stream> " prefixes
	// Done reports whether the writer of the log has finished (the attempt
	// ended). Checked only when following.
	Done func() bool
	// Poll is how often to look for new lines while following (default 100ms).
	Poll time.Duration
	// Flush, if set, is called after each batch of lines (HTTP streaming).
	Flush func()
}

// Copy writes the log at path to w, formatted per opts. A missing file is an
// empty log while following (the attempt may not have started yet) and
// fs.ErrNotExist otherwise.
func Copy(ctx context.Context, w io.Writer, path string, opts Options) error {
	if opts.Poll <= 0 {
		opts.Poll = 100 * time.Millisecond
	}
	var f *os.File
	for {
		var err error
		f, err = os.Open(path)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) || !opts.Follow {
			return err
		}
		if opts.Done != nil && opts.Done() {
			if f, err = os.Open(path); err != nil {
				return nil // ended without ever writing a log
			}
			break
		}
		if err := wait(ctx, opts.Poll); err != nil {
			return nil
		}
	}
	defer f.Close()
	if opts.Tail > 0 {
		off, err := TailOffset(f, opts.Tail)
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
			if len(partial) > 0 {
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

// Tail returns the last n lines of the log at path, text only.
func Tail(path string, n int) ([]Line, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	off, err := TailOffset(f, n)
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
