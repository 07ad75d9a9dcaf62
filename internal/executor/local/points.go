package local

import (
	"bufio"
	"errors"
	"io"
	"os"
	"path/filepath"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/logs"
)

// maxReadBytes bounds how much of a metric log one read takes, so that a
// chatty attempt is reported in several events rather than one huge one.
const maxReadBytes = 4 << 20

// reportPoints reads the attempt's metric log (metrics.jsonl, which its
// shim appends to) from where the last read stopped and reports the new
// points as Progress events. The shim notifies after each append, so a
// notification always finds the points it announces. A reattaching
// executor starts from the beginning: the consumer skips points it has.
// Calls for one attempt are serialized.
func (e *Executor) reportPoints(a *attempt) {
	a.pointsMu.Lock()
	defer a.pointsMu.Unlock()
	// The attempt directory is the server's, but the job may have
	// written there before it was isolated: never follow a link.
	f, err := logs.OpenFile(filepath.Join(a.dir, metricsFile))
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			e.log.Warn("read metric log", "attempt", a.ref.String(), "err", err)
		}
		return
	}
	defer f.Close()
	var ms []logs.Metric // reused for every record
	for {
		points, n, step, at := readPoints(f, a.pointsOff, a.ref, ms)
		a.pointsOff += n
		if len(points) > 0 {
			e.emit(executor.Event{Ref: a.ref, Kind: executor.Progress, Step: step, At: at, Points: points})
		}
		if n == 0 || (n < maxReadBytes && len(points) < executor.MaxPoints) {
			return
		}
	}
}

// readPoints parses the complete records of the metric log from off on,
// up to maxReadBytes and executor.MaxPoints (lines longer than the
// reader's buffer are skipped), and returns their points,
// the bytes consumed, and the last record's step and time. An incomplete
// last line is left for the next read.
func readPoints(f *os.File, off int64, ref executor.Ref, ms []logs.Metric) (points []domain.MetricPoint, n int64, step int64, at time.Time) {
	br := bufio.NewReaderSize(io.NewSectionReader(f, off, maxReadBytes), 2*maxLine)
	for len(points) < executor.MaxPoints {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// Longer than any report: skip it whole, once it is.
			skipped := int64(len(line))
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = br.ReadSlice('\n')
				skipped += int64(len(line))
			}
			if err != nil {
				break
			}
			n += skipped
			continue
		}
		if err != nil {
			break // the end, or an incomplete last line
		}
		n += int64(len(line))
		t, s, got, ok := logs.ParseMetricRecord(line, ms)
		ms = got
		if !ok {
			continue
		}
		for _, m := range ms {
			points = append(points, domain.MetricPoint{JobID: ref.JobID, Attempt: ref.Attempt, Step: s, Key: string(m.Key), Value: m.Value, At: t})
		}
		step, at = s, t
	}
	return points, n, step, at
}
