package local

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// progressPrefix starts a stdout line that reports training progress:
// `trainyard: {"step": 100, "loss": 0.53}`.
var progressPrefix = []byte("trainyard: ")

// metricsFile is the attempt directory's metric log: one JSON object per
// line, {"t": unix ns, "step": N, "m": {"loss": 0.5}}.
const metricsFile = "metrics.jsonl"

// notifyEvery is the shortest interval between two progress notifications
// to the executor.
const notifyEvery = time.Second

// metric is one parsed value of a progress line.
type metric struct {
	key []byte // the JSON key, without quotes (never holds escapes)
	val float64
}

// parseProgress parses the text after the prefix: one JSON object with an
// integer "step" and numeric metrics (other fields are ignored). It appends
// the metrics to ms (reused between calls) and reports ok=false when the
// text is not a progress report. Flat objects are scanned directly;
// anything unusual (escapes, nesting) goes through encoding/json.
func parseProgress(b []byte, ms []metric) (step int64, out []metric, ok bool) {
	step, out, ok, sure := scanProgress(b, ms[:0])
	if sure {
		return step, out, ok
	}
	return decodeProgress(b, ms[:0])
}

// scanProgress is the fast path of parseProgress; sure=false means the
// text needs the full JSON decoder.
func scanProgress(b []byte, ms []metric) (step int64, out []metric, ok, sure bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return 0, nil, false, true
	}
	i = skipSpace(b, i+1)
	haveStep := false
	for first := true; ; first = false {
		if i < len(b) && b[i] == '}' && first {
			i++
			break
		}
		if i >= len(b) || b[i] != '"' {
			return 0, nil, false, false
		}
		j := i + 1
		for j < len(b) && b[j] != '"' && b[j] != '\\' {
			j++
		}
		if j >= len(b) || b[j] != '"' {
			return 0, nil, false, false
		}
		key := b[i+1 : j]
		i = skipSpace(b, j+1)
		if i >= len(b) || b[i] != ':' {
			return 0, nil, false, false
		}
		i = skipSpace(b, i+1)
		if i >= len(b) {
			return 0, nil, false, false
		}
		switch c := b[i]; {
		case c == '-' || (c >= '0' && c <= '9'):
			j = i
			for j < len(b) && (b[j] == '-' || b[j] == '+' || b[j] == '.' || b[j] == 'e' || b[j] == 'E' || (b[j] >= '0' && b[j] <= '9')) {
				j++
			}
			num := b[i:j]
			if string(key) == "step" {
				n, err := strconv.ParseInt(string(num), 10, 64)
				if err != nil || n < 0 {
					return 0, nil, false, true
				}
				step, haveStep = n, true
			} else if f, err := strconv.ParseFloat(string(num), 64); err == nil && !math.IsInf(f, 0) {
				ms = append(ms, metric{key: key, val: f})
			} else if err != nil && !errors.Is(err, strconv.ErrRange) {
				return 0, nil, false, true
			}
			i = j
		default:
			return 0, nil, false, false // strings, literals, nesting: let the decoder judge
		}
		i = skipSpace(b, i)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
			continue
		}
		if i < len(b) && b[i] == '}' {
			i++
			break
		}
		return 0, nil, false, true
	}
	if skipSpace(b, i) != len(b) {
		return 0, nil, false, true
	}
	return step, ms, haveStep, true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// decodeProgress is parseProgress through encoding/json.
func decodeProgress(b []byte, ms []metric) (step int64, out []metric, ok bool) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return 0, nil, false
	}
	sv, found := raw["step"]
	if !found {
		return 0, nil, false
	}
	step, err := strconv.ParseInt(string(sv), 10, 64)
	if err != nil || step < 0 {
		return 0, nil, false
	}
	for k, v := range raw {
		if k == "step" || len(v) == 0 || strings.ContainsAny(k, "\"\\") || !utf8.ValidString(k) {
			continue
		}
		if c := v[0]; c != '-' && (c < '0' || c > '9') {
			continue // not a number
		}
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			continue
		}
		ms = append(ms, metric{key: []byte(k), val: f})
	}
	return step, ms, true
}

// progressSink appends parsed progress to metrics.jsonl and notifies the
// executor of the latest step at most once per notifyEvery. Safe for
// concurrent use.
type progressSink struct {
	notify func(line string)
	path   string

	mu       sync.Mutex
	f        *os.File // opened on the first point
	failed   bool     // the file could not be opened; points are dropped
	buf      []byte
	ms       []metric // reused by parseProgress
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
// the progress reports among them to the metric log in one write. Lines
// without the prefix cost one comparison.
func (p *progressSink) lines(t time.Time, ls [][]byte) {
	if p == nil {
		return
	}
	any := false
	for _, l := range ls {
		if bytes.HasPrefix(l, progressPrefix) {
			any = true
			break
		}
	}
	if !any {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.buf = p.buf[:0]
	found := false
	for _, l := range ls {
		if !bytes.HasPrefix(l, progressPrefix) {
			continue
		}
		step, ms, ok := parseProgress(l[len(progressPrefix):], p.ms)
		p.ms = ms[:0]
		if !ok {
			continue
		}
		found = true
		p.step = step
		p.buf = append(p.buf, `{"t":`...)
		p.buf = strconv.AppendInt(p.buf, t.UnixNano(), 10)
		p.buf = append(p.buf, `,"step":`...)
		p.buf = strconv.AppendInt(p.buf, step, 10)
		p.buf = append(p.buf, `,"m":{`...)
		for i, m := range ms {
			if i > 0 {
				p.buf = append(p.buf, ',')
			}
			p.buf = append(p.buf, '"')
			p.buf = append(p.buf, m.key...)
			p.buf = append(p.buf, `":`...)
			p.buf = strconv.AppendFloat(p.buf, m.val, 'g', -1, 64)
		}
		p.buf = append(p.buf, "}}\n"...)
	}
	if !found {
		return
	}
	if p.f == nil && !p.failed {
		f, err := os.OpenFile(p.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
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
