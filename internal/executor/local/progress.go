package local

import (
	"os"
	"strconv"
	"sync"
	"time"

	"trainyard/internal/logs"
)

// isProgress reports whether l starts with logs.ProgressPrefix; comparing
// with the constant compiles to a few loads.
func isProgress(l []byte) bool {
	return len(l) >= len(logs.ProgressPrefix) && string(l[:len(logs.ProgressPrefix)]) == logs.ProgressPrefix
}

// metricsFile is the attempt directory's metric log: one record per
// progress report, in the format of logs.AppendMetricRecords.
const metricsFile = "metrics.jsonl"

// notifyEvery is the shortest interval between two progress notifications
// to the executor.
const notifyEvery = time.Second

// progressSink appends progress reports to metrics.jsonl, unparsed (the
// controller parses them), and notifies the executor of the latest step at
// most once per notifyEvery. Safe for concurrent use.
type progressSink struct {
	notify func(line string)
	path   string

	mu       sync.Mutex
	f        *os.File // opened on the first point
	failed   bool     // the file could not be opened; points are dropped
	buf      []byte
	payloads [][]byte // the reports of one call to lines
	step     int64
	at       time.Time
	pending  bool // a point arrived since the last notification
	notified time.Time
	timer    *time.Timer
	closed   bool
}

func newProgressSink(path string, notify func(string)) *progressSink {
	return &progressSink{path: path, notify: notify}
}

// lines handles log lines (already redacted) written at t: it appends
// the progress reports among them to the metric log in one write. A line
// without the prefix costs one short comparison; a progress line is
// checked, not parsed: its metric values are not converted.
func (p *progressSink) lines(t time.Time, ls [][]byte) {
	if p == nil {
		return
	}
	first := 0
	for first < len(ls) && !isProgress(ls[first]) {
		first++
	}
	if first == len(ls) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.payloads = p.payloads[:0]
	for _, l := range ls[first:] {
		if !isProgress(l) {
			continue
		}
		payload := l[len(logs.ProgressPrefix):]
		step, ok := logs.CheckProgress(payload)
		if !ok {
			continue
		}
		p.step = step
		p.payloads = append(p.payloads, payload)
	}
	if len(p.payloads) == 0 {
		return
	}
	p.buf = logs.AppendMetricRecords(p.buf[:0], t, p.payloads)
	if p.f == nil && !p.failed {
		f, err := os.OpenFile(p.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			p.failed = true
		}
		p.f = f
	}
	if p.f != nil {
		_, _ = p.f.Write(p.buf)
	}
	p.at, p.pending = t, true
	if wait := notifyEvery - t.Sub(p.notified); wait > 0 && !p.notified.IsZero() {
		if p.timer == nil {
			p.timer = time.AfterFunc(wait, p.flush)
		}
		return
	}
	p.sendLocked()
}

// flush sends a pending notification.
func (p *progressSink) flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.timer = nil
	if p.pending && !p.closed {
		p.sendLocked()
	}
}

func (p *progressSink) sendLocked() {
	p.pending = false
	p.notified = time.Now()
	p.notify("progress " + strconv.FormatInt(p.step, 10) + " " + strconv.FormatInt(p.at.UnixNano(), 10))
}

// close sends any pending notification and closes the file; later lines
// are ignored.
func (p *progressSink) close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	if p.pending {
		p.sendLocked()
	}
	p.closed = true
	if p.f != nil {
		_ = p.f.Close()
	}
}
