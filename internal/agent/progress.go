package agent

import (
	"bytes"
	"encoding/json"
	"sync"
	"time"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
	"trainyard/internal/logs"
)

// maxLine is the longest stdout line looked at for progress; a longer one
// passes through but is no report (as in the local executor).
const maxLine = 64 << 10

// Bounds of one metrics request (the server takes at most 10,000 points
// and 1 MiB per request) and of the points kept while the API is away.
const (
	maxBatchPoints = 1000
	maxBatchBytes  = 512 << 10
	maxPending     = 100_000
	maxMetricKey   = 128
)

// lineSplitter cuts a byte stream into lines (without their "\n" or
// "\r\n") for fn; lines longer than maxLine are dropped whole.
type lineSplitter struct {
	fn      func([]byte)
	partial []byte
	skip    bool // the current line is too long
}

func (s *lineSplitter) feed(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			s.add(b)
			return
		}
		if len(s.partial) == 0 && !s.skip {
			if i <= maxLine {
				s.emit(b[:i])
			}
		} else {
			s.add(b[:i])
			if !s.skip {
				s.emit(s.partial)
			}
		}
		s.partial, s.skip = s.partial[:0], false
		b = b[i+1:]
	}
}

func (s *lineSplitter) add(b []byte) {
	if s.skip {
		return
	}
	if len(s.partial)+len(b) > maxLine {
		s.partial, s.skip = s.partial[:0], true
		return
	}
	s.partial = append(s.partial, b...)
}

// end hands over a last line without a newline.
func (s *lineSplitter) end() {
	if len(s.partial) > 0 && !s.skip {
		s.emit(s.partial)
	}
	s.partial, s.skip = s.partial[:0], false
}

func (s *lineSplitter) emit(l []byte) {
	if s.fn != nil {
		s.fn(bytes.TrimSuffix(l, []byte("\r")))
	}
}

// metricsQueue collects the progress reports of the command's stdout and
// posts them to the metrics endpoint, at most once per flushEvery and
// once more at the end.
type metricsQueue struct {
	rep   *reporter
	every time.Duration
	ms    []logs.Metric // reused by the parser (only passThrough's goroutine parses)

	mu      sync.Mutex
	pending []apitypes.MetricsStep
	dropped int // points beyond maxPending
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
}

func newMetricsQueue(rep *reporter, every time.Duration) *metricsQueue {
	if every <= 0 {
		every = flushEvery
	}
	q := &metricsQueue{rep: rep, every: every, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go q.run()
	return q
}

// line takes one stdout line: a progress report (logs.ProgressPrefix and
// a JSON object with a "step", parsed as the local executor parses it)
// becomes a point.
func (q *metricsQueue) line(l []byte) {
	if len(l) < len(logs.ProgressPrefix) || string(l[:len(logs.ProgressPrefix)]) != logs.ProgressPrefix {
		return
	}
	step, ms, ok := logs.ParseProgress(l[len(logs.ProgressPrefix):], q.ms)
	q.ms = ms
	if !ok {
		return
	}
	var metrics map[string]float64
	for _, m := range ms {
		k := string(m.Key)
		// What the server would refuse would make it refuse the whole
		// batch: leave it out here.
		if k == "" || len(k) > maxMetricKey || domain.TextProblem(k, false) != "" {
			continue
		}
		if metrics == nil {
			metrics = make(map[string]float64, len(ms))
		}
		metrics[k] = m.Value
	}
	if len(metrics) == 0 {
		return
	}
	q.mu.Lock()
	if len(q.pending) >= maxPending {
		q.dropped++
	} else {
		q.pending = append(q.pending, apitypes.MetricsStep{Step: step, Metrics: metrics})
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// run sends what is pending when points arrive, at most once per every.
func (q *metricsQueue) run() {
	defer close(q.done)
	var last time.Time
	for {
		select {
		case <-q.stop:
			return
		case <-q.wake:
		}
		if wait := q.every - time.Since(last); wait > 0 {
			select {
			case <-q.stop:
				return
			case <-time.After(wait):
			}
		}
		last = time.Now()
		q.send()
	}
}

// send posts every pending point, in batches the server takes.
func (q *metricsQueue) send() {
	q.mu.Lock()
	points := q.pending
	q.pending = nil
	q.mu.Unlock()
	for len(points) > 0 {
		n, size := 0, 0
		for n < len(points) && n < maxBatchPoints {
			b, _ := json.Marshal(points[n])
			if n > 0 && size+len(b) > maxBatchBytes {
				break
			}
			size += len(b) + 1
			n++
		}
		_ = q.rep.postJSON("metrics", "/metrics", apitypes.MetricsReport{Points: points[:n]})
		points = points[n:]
	}
}

// close stops the sender and sends what is left.
func (q *metricsQueue) close() {
	close(q.stop)
	<-q.done
	q.send()
	q.mu.Lock()
	dropped := q.dropped
	q.mu.Unlock()
	if dropped > 0 {
		q.rep.log.printf("%d progress reports were dropped: more than %d waited for the API", dropped, maxPending)
	}
}
