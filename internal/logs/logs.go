// Package logs owns the per-attempt log format and its path scheme, and reads
// logs back (tail, follow). The local executor's supervisor writes the files;
// the service reads them.
//
// Every line of a log file is
//
//	<time RFC 3339, UTC, nanoseconds> <stream> <text>
//
// where stream is "stdout", "stderr" or "system" (the supervisor's own notes:
// start, signals, exit). Text never contains a newline.
package logs

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strconv"
	"time"
)

// Streams.
const (
	Stdout = "stdout"
	Stderr = "stderr"
	System = "system"
)

// TimeFormat is the timestamp layout of a log line: fixed width, so lines sort
// and align.
const TimeFormat = "2006-01-02T15:04:05.000000000Z"

// AppendLine appends one formatted line (with its newline) to dst.
func AppendLine(dst []byte, t time.Time, stream string, text []byte) []byte {
	dst = t.UTC().AppendFormat(dst, TimeFormat)
	dst = append(dst, ' ')
	dst = append(dst, stream...)
	dst = append(dst, ' ')
	dst = append(dst, text...)
	return append(dst, '\n')
}

// Line is one parsed log line.
type Line struct {
	Time   time.Time
	Stream string
	Text   string
}

// ParseLine parses one line (without its newline). A line that does not have
// the format is returned whole as Text with an empty Stream.
func ParseLine(b []byte) Line {
	b = bytes.TrimSuffix(b, []byte("\n"))
	sp := bytes.IndexByte(b, ' ')
	if sp != len(TimeFormat) {
		return Line{Text: string(b)}
	}
	t, err := time.Parse(TimeFormat, string(b[:sp]))
	if err != nil {
		return Line{Text: string(b)}
	}
	rest := b[sp+1:]
	sp2 := bytes.IndexByte(rest, ' ')
	if sp2 < 0 {
		return Line{Time: t, Stream: string(rest)}
	}
	return Line{Time: t, Stream: string(rest[:sp2]), Text: string(rest[sp2+1:])}
}

// Layout is the path scheme of attempt directories under one root:
//
//	<root>/<job-id>/<attempt>/            attempt directory (supervisor state)
//	<root>/<job-id>/<attempt>/output.log  the attempt's log
//	<root>/<job-id>/<attempt>/work/       the process's working directory
type Layout struct {
	Root string
}

// AttemptDir is the directory of one attempt.
func (l Layout) AttemptDir(jobID int64, attempt int) string {
	return filepath.Join(l.Root, strconv.FormatInt(jobID, 10), strconv.Itoa(attempt))
}

// LogPath is the log file of one attempt.
func (l Layout) LogPath(jobID int64, attempt int) string {
	return filepath.Join(l.AttemptDir(jobID, attempt), logName)
}

// WorkDir is the working directory of one attempt.
func (l Layout) WorkDir(jobID int64, attempt int) string {
	return filepath.Join(l.AttemptDir(jobID, attempt), "work")
}

// String renders the line back in file format (without newline).
func (ln Line) String() string {
	if ln.Stream == "" {
		return ln.Text
	}
	return fmt.Sprintf("%s %s %s", ln.Time.UTC().Format(TimeFormat), ln.Stream, ln.Text)
}
