package logs

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"trainyard/internal/domain"
)

// ProgressPrefix starts a stdout line that reports training progress:
// `trainyard: {"step": 100, "loss": 0.53}`.
const ProgressPrefix = "trainyard: "

// Metric is one numeric value of a progress report.
type Metric struct {
	Key   []byte // the JSON key, unquoted; may alias the parsed text
	Value float64
}

// ParseProgress parses the text after ProgressPrefix: one JSON object with
// an integer "step" (0 or more) and numeric metrics; other fields are
// ignored. It appends the metrics to ms[:0] (reused between calls), one per
// key (the last one wins), and reports ok=false when the text is not a
// progress report. Metrics whose key is not valid UTF-8 or holds a control
// or bidirectional formatting character (domain.UnsafeRune), and values out
// of float64 range, are left out. Flat objects
// are scanned directly; anything unusual (escapes, nesting) goes through
// encoding/json.
func ParseProgress(b []byte, ms []Metric) (step int64, out []Metric, ok bool) {
	step, out, ok, sure := scanProgress(b, ms[:0], true)
	if !sure {
		step, out, ok = decodeProgress(b, ms[:0], true)
	}
	if !ok {
		return 0, ms[:0], false
	}
	return step, rankMetrics(cleanMetrics(out)), true
}

// RankKey is the progress field that names the reporting process's rank
// (torch.distributed's RANK). It is not a metric: a report of rank N > 0
// files its metrics under "<key>/rank<N>", so that every rank keeps a series
// of its own; rank 0 (or no rank) files them under the plain key.
const RankKey = "rank"

// maxRank bounds the ranks told apart; a larger (or fractional or
// negative) "rank" is an ordinary metric.
const maxRank = 1 << 20

// RankSuffix is what a report of rank r appends to its metric keys: "" for
// rank 0, "/rank<r>" above. ok is false when r is not a rank (negative,
// fractional or too large): "rank" is then an ordinary metric.
func RankSuffix(r float64) (suffix string, ok bool) {
	if r < 0 || r >= maxRank || r != math.Trunc(r) {
		return "", false
	}
	if r == 0 {
		return "", true
	}
	return "/rank" + strconv.Itoa(int(r)), true
}

// rankMetrics applies RankKey to ms (cleaned: one entry per key).
func rankMetrics(ms []Metric) []Metric {
	i := slices.IndexFunc(ms, func(m Metric) bool { return string(m.Key) == RankKey })
	if i < 0 {
		return ms
	}
	suffix, ok := RankSuffix(ms[i].Value)
	if !ok {
		return ms
	}
	ms = slices.Delete(ms, i, i+1)
	if suffix == "" {
		return ms
	}
	size := 0
	for _, m := range ms {
		size += len(m.Key) + len(suffix)
	}
	buf := make([]byte, 0, size)
	for j, m := range ms {
		start := len(buf)
		buf = append(append(buf, m.Key...), suffix...)
		ms[j].Key = buf[start:len(buf):len(buf)]
	}
	return ms
}

// CheckProgress reports the step and ok that ParseProgress reports for b,
// without converting the metric values: the test a log collector applies
// to every progress line before passing it on unparsed.
func CheckProgress(b []byte) (step int64, ok bool) {
	step, _, ok, sure := scanProgress(b, nil, false)
	if !sure {
		step, _, ok = decodeProgress(b, nil, false)
	}
	return step, ok
}

// scanProgress is the fast path of ParseProgress; sure=false means the
// text needs the full JSON decoder. With convert=false the metric values
// are only checked, as ParseFloat would, and not collected.
func scanProgress(b []byte, ms []Metric, convert bool) (step int64, out []Metric, ok, sure bool) {
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
			j, valid := number(b, i)
			num := b[i:j]
			switch {
			case string(key) == "step":
				n, ok := parseStep(num)
				if !ok {
					return 0, nil, false, true
				}
				step, haveStep = n, true
			case !valid:
				return 0, nil, false, true
			case convert:
				// valid: err is nil or a range error.
				if f, err := strconv.ParseFloat(string(num), 64); err == nil && !math.IsInf(f, 0) {
					ms = append(ms, Metric{Key: key, Value: f})
				}
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

// numChar marks the bytes of a number as scanProgress delimits it.
var numChar = func() (t [256]bool) {
	for _, c := range []byte("-+.eE0123456789") {
		t[c] = true
	}
	return t
}()

// number delimits the number that starts at b[i] ('-' or a digit): the
// longest run of numChar bytes. valid reports whether strconv.ParseFloat
// accepts it, possibly with a range error: an optional sign, digits with at
// most one '.', and an optional exponent with at least one digit.
func number(b []byte, i int) (end int, valid bool) {
	j := i
	if b[j] == '-' {
		j++
	}
	digits, dot := false, false
	for ; j < len(b); j++ {
		if c := b[j]; c-'0' <= 9 {
			digits = true
		} else if c == '.' && !dot {
			dot = true
		} else {
			break
		}
	}
	valid = digits
	if valid && j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		j++
		if j < len(b) && (b[j] == '-' || b[j] == '+') {
			j++
		}
		valid = j < len(b) && b[j]-'0' <= 9
		for j < len(b) && b[j]-'0' <= 9 {
			j++
		}
	}
	end = j
	for end < len(b) && numChar[b[end]] {
		end++
	}
	return end, valid && end == j
}

// parseStep is strconv.ParseInt(num, 10, 64) for a number as scanProgress
// delimits it, with ok=false for an error or a negative result.
func parseStep(num []byte) (n int64, ok bool) {
	neg := len(num) > 0 && num[0] == '-'
	if neg {
		num = num[1:]
	}
	if len(num) == 0 {
		return 0, false
	}
	for _, c := range num {
		d := int64(c - '0')
		if c-'0' > 9 || n > (math.MaxInt64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	if neg && n != 0 {
		return 0, false
	}
	return n, true
}

// space marks JSON whitespace.
var space = [256]bool{' ': true, '\t': true, '\r': true, '\n': true}

func skipSpace(b []byte, i int) int {
	for i < len(b) && space[b[i]] {
		i++
	}
	return i
}

// decodeProgress is ParseProgress through encoding/json; with
// convert=false it only checks.
func decodeProgress(b []byte, ms []Metric, convert bool) (step int64, out []Metric, ok bool) {
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
	if !convert {
		return step, nil, true
	}
	for k, v := range raw {
		if k == "step" || len(v) == 0 || strings.ContainsAny(k, "\"\\") {
			continue
		}
		if c := v[0]; c != '-' && (c < '0' || c > '9') {
			continue // not a number
		}
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			continue
		}
		ms = append(ms, Metric{Key: []byte(k), Value: f})
	}
	return step, ms, true
}

// cleanMetrics drops metrics with an unusable key and earlier values of a
// repeated key, in place.
func cleanMetrics(ms []Metric) []Metric {
	out := ms[:0]
	for i, m := range ms {
		if !validKey(m.Key) {
			continue
		}
		later := false
		for _, n := range ms[i+1:] {
			if bytes.Equal(n.Key, m.Key) {
				later = true
				break
			}
		}
		if !later {
			out = append(out, m)
		}
	}
	return out
}

func validKey(k []byte) bool {
	ascii := true
	for _, c := range k {
		if c < 0x20 || c == 0x7f {
			return false
		}
		if c >= 0x80 {
			ascii = false
		}
	}
	if ascii {
		return true
	}
	if !utf8.Valid(k) {
		return false
	}
	for _, r := range string(k) { // C1 controls, bidirectional formatting
		if domain.UnsafeRune(r) {
			return false
		}
	}
	return true
}

// The metric log (metrics.jsonl in an attempt directory) holds one record
// per progress report, written by the local executor's supervisor:
//
//	{"t":<unix ns>,"p":<the report as printed, unparsed>}
//
// The report passed CheckProgress, which accepts a little more than JSON
// (numbers such as 01 or 1., keys with control characters), so read
// records with ParseMetricRecord rather than a JSON decoder.
//
// Logs written before this format hold parsed records instead, which
// ParseMetricRecord still reads:
//
//	{"t":<unix ns>,"step":N,"m":{"loss":0.5}}
const (
	recordStart = `{"t":`
	recordRaw   = `,"p":`
)

// AppendMetricRecords appends one metric log record (with its newline)
// per progress report payload (the text after ProgressPrefix, accepted by
// CheckProgress) printed at t.
func AppendMetricRecords(dst []byte, t time.Time, payloads [][]byte) []byte {
	if len(payloads) == 0 {
		return dst
	}
	start := len(dst)
	dst = append(dst, recordStart...)
	dst = strconv.AppendInt(dst, t.UnixNano(), 10)
	dst = append(dst, recordRaw...)
	head := len(dst) - start // the header is the same for every record
	for i, p := range payloads {
		if i > 0 {
			dst = append(dst, dst[start:start+head]...)
		}
		dst = append(dst, p...)
		dst = append(dst, "}\n"...)
	}
	return dst
}

// ParseMetricRecord parses one metric log record (with or without its
// newline), in either format, appending its metrics to ms[:0] as
// ParseProgress does. ok=false: the line is not a record.
func ParseMetricRecord(line []byte, ms []Metric) (t time.Time, step int64, out []Metric, ok bool) {
	line = bytes.TrimSpace(line)
	if rest, found := bytes.CutPrefix(line, []byte(recordStart)); found {
		n := 0
		for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
			n++
		}
		if payload, found := bytes.CutPrefix(rest[n:], []byte(recordRaw)); found && n > 0 {
			ns, err := strconv.ParseInt(string(rest[:n]), 10, 64)
			payload, closed := bytes.CutSuffix(payload, []byte("}"))
			if err != nil || !closed {
				return time.Time{}, 0, ms[:0], false
			}
			step, out, ok = ParseProgress(payload, ms)
			return time.Unix(0, ns).UTC(), step, out, ok
		}
	}
	var rec struct {
		T    int64              `json:"t"`
		Step int64              `json:"step"`
		M    map[string]float64 `json:"m"`
	}
	if json.Unmarshal(line, &rec) != nil {
		return time.Time{}, 0, ms[:0], false
	}
	out = ms[:0]
	for k, v := range rec.M {
		out = append(out, Metric{Key: []byte(k), Value: v})
	}
	return time.Unix(0, rec.T).UTC(), rec.Step, out, true
}
