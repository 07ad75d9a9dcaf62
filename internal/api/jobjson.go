package api

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
)

// The answers that show and list jobs are encoded here, field by field,
// into the bytes encoding/json writes for them (TestJobJSONMatches holds
// the two together): encoding/json spends most of a show's encoding on
// reflection, and on calling and re-validating time.Time's MarshalJSON.
// A value these functions cannot encode as encoding/json would (a NaN, a
// year past 9999) makes them report false, and encoding/json answers it.

// appendFast appends v as encoding/json's Encoder does when v is a job or
// a list of jobs; ok is false for any other value, and for one it leaves
// to encoding/json.
func appendFast(b []byte, v any) (_ []byte, ok bool) {
	switch v := v.(type) {
	case apitypes.Job:
		return appendJobLine(b, &v)
	case jobPage:
		return v.append(b)
	}
	return b, false
}

// jobPage is a list answer not yet converted to its apitypes.JobList:
// the fast encoder converts one job at a time into the same scratch DTO,
// and encoding/json (pretty, or a value the fast one refuses) gets the
// whole list.
type jobPage struct {
	jobs   []domain.Job
	dto    func(j *domain.Job, i int) apitypes.Job // the DTO of jobs[i]
	cursor string
}

func (p jobPage) list() apitypes.JobList {
	l := apitypes.JobList{Jobs: make([]apitypes.Job, len(p.jobs)), NextCursor: p.cursor}
	for i := range p.jobs {
		l.Jobs[i] = p.dto(&p.jobs[i], i)
	}
	return l
}

// MarshalJSON is the list's encoding for encoding/json.
func (p jobPage) MarshalJSON() ([]byte, error) { return json.Marshal(p.list()) }

// append appends the page as encoding/json's Encoder does its list,
// newline included.
func (p jobPage) append(b []byte) ([]byte, bool) {
	b = append(b, `{"jobs":[`...)
	for i := range p.jobs {
		if i > 0 {
			b = append(b, ',')
		}
		j := p.dto(&p.jobs[i], i)
		var ok bool
		if b, ok = appendJob(b, &j); !ok {
			return b, false
		}
	}
	b = append(b, ']')
	if p.cursor != "" {
		b = append(b, `,"next_cursor":`...)
		b = appendString(b, p.cursor)
	}
	return append(b, "}\n"...), true
}

// appendJobLine appends j as encoding/json's Encoder does, newline
// included.
func appendJobLine(b []byte, j *apitypes.Job) ([]byte, bool) {
	b, ok := appendJob(b, j)
	return append(b, '\n'), ok
}

func appendJob(b []byte, j *apitypes.Job) ([]byte, bool) {
	ok := true
	b = append(b, `{"id":`...)
	b = strconv.AppendInt(b, j.ID, 10)
	b = appendKeyString(b, `,"name":`, j.Name)
	b = appendKeyString(b, `,"project":`, j.Project)
	b = appendKeyString(b, `,"pool":`, j.Pool)
	b = appendKeyString(b, `,"state":`, j.State)
	b = appendOmitString(b, `,"reason":`, j.Reason)
	b = appendOmitString(b, `,"message":`, j.Message)
	b = appendKeyString(b, `,"priority":`, j.Priority)
	b = appendKeyString(b, `,"submitter":`, j.Submitter)
	b = append(b, `,"submitted_at":`...)
	b = appendTime(b, j.SubmittedAt, &ok)
	b = append(b, `,"updated_at":`...)
	b = appendTime(b, j.UpdatedAt, &ok)
	b = appendOmitTime(b, `,"started_at":`, j.StartedAt, &ok)
	b = appendOmitTime(b, `,"finished_at":`, j.FinishedAt, &ok)
	b = append(b, `,"resources":{"gpus":`...)
	b = strconv.AppendInt(b, int64(j.Resources.GPUs), 10)
	b = append(b, `,"cpus":`...)
	b = appendFloat(b, j.Resources.CPUs, &ok)
	b = appendKeyString(b, `,"memory":`, j.Resources.Memory)
	b = append(b, `,"nodes":`...)
	b = strconv.AppendInt(b, int64(j.Resources.Nodes), 10)
	b = append(b, '}')
	b = appendKeyString(b, `,"output_dir":`, j.OutputDir)
	b = append(b, `,"attempt_count":`...)
	b = strconv.AppendInt(b, int64(j.AttemptCount), 10)
	if j.CancelRequested {
		b = append(b, `,"cancel_requested":true`...)
	}
	b = append(b, `,"preemptions":`...)
	b = strconv.AppendInt(b, int64(j.Preemptions), 10)
	b = appendOmitString(b, `,"spec_hash":`, j.SpecHash)
	if c := j.Code; c != nil {
		b = appendKeyString(b, `,"code":{"sha256":`, c.SHA256)
		b = appendOmitString(b, `,"commit":`, c.Commit)
		if c.Dirty {
			b = append(b, `,"dirty":true`...)
		}
		b = append(b, '}')
	}
	if j.RerunOf != 0 {
		b = append(b, `,"rerun_of":`...)
		b = strconv.AppendInt(b, j.RerunOf, 10)
	}
	b = appendOmitString(b, `,"cost":`, j.Cost)
	b = appendOmitString(b, `,"cost_per_hour":`, j.CostPerHour)
	b = appendOmitString(b, `,"currency":`, j.Currency)
	if z := j.Sizing; z != nil {
		b = append(b, `,"sizing":{"held_seconds":`...)
		b = appendFloat(b, z.HeldSeconds, &ok)
		b = append(b, `,"cpus":`...)
		b = appendFloat(b, z.CPUs, &ok)
		b = append(b, `,"used_cpus":`...)
		b = appendFloat(b, z.UsedCPUs, &ok)
		if z.GPUs != 0 {
			b = append(b, `,"gpus":`...)
			b = strconv.AppendInt(b, int64(z.GPUs), 10)
		}
		if z.UsedGPUs != 0 {
			b = append(b, `,"used_gpus":`...)
			b = appendFloat(b, z.UsedGPUs, &ok)
		}
		b = appendOmitString(b, `,"idle_cost":`, z.IdleCost)
		b = append(b, `,"memory_bytes":`...)
		b = strconv.AppendInt(b, z.Memory, 10)
		b = append(b, `,"peak_memory_bytes":`...)
		b = strconv.AppendInt(b, z.PeakMemory, 10)
		b = append(b, `,"oversized":`...)
		b = strconv.AppendBool(b, z.Oversized)
		b = append(b, `,"near_memory_limit":`...)
		b = strconv.AppendBool(b, z.NearMemory)
		b = append(b, '}')
	}
	if len(j.Spec) > 0 {
		b = append(b, `,"spec":`...)
		b = appendRaw(b, j.Spec, &ok)
	}
	if len(j.Attempts) > 0 {
		b = append(b, `,"attempts":[`...)
		for i := range j.Attempts {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendAttempt(b, &j.Attempts[i], &ok)
		}
		b = append(b, ']')
	}
	if len(j.Transitions) > 0 {
		b = append(b, `,"transitions":[`...)
		for i := range j.Transitions {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendTransition(b, &j.Transitions[i], &ok)
		}
		b = append(b, ']')
	}
	if j.Created != nil {
		b = append(b, `,"created":`...)
		b = strconv.AppendBool(b, *j.Created)
	}
	if len(j.Warnings) > 0 {
		b = append(b, `,"warnings":[`...)
		for i, w := range j.Warnings {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, w)
		}
		b = append(b, ']')
	}
	return append(b, '}'), ok
}

func appendAttempt(b []byte, a *apitypes.Attempt, ok *bool) []byte {
	b = append(b, `{"number":`...)
	b = strconv.AppendInt(b, int64(a.Number), 10)
	b = appendKeyString(b, `,"state":`, a.State)
	b = appendOmitString(b, `,"reason":`, a.Reason)
	b = appendOmitString(b, `,"message":`, a.Message)
	b = append(b, `,"exit_code":`...)
	if a.ExitCode == nil {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, int64(*a.ExitCode), 10)
	}
	b = appendOmitString(b, `,"node":`, a.Node)
	if len(a.GPUs) > 0 {
		b = append(b, `,"gpus":[`...)
		for i, g := range a.GPUs {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(g), 10)
		}
		b = append(b, ']')
	}
	b = append(b, `,"created_at":`...)
	b = appendTime(b, a.CreatedAt, ok)
	b = appendOmitTime(b, `,"started_at":`, a.StartedAt, ok)
	b = appendOmitTime(b, `,"finished_at":`, a.FinishedAt, ok)
	if u := a.Usage; u != nil {
		b = append(b, `,"usage":{"cpu_seconds":`...)
		b = appendFloat(b, u.CPUSeconds, ok)
		b = append(b, `,"max_rss_bytes":`...)
		b = strconv.AppendInt(b, u.MaxRSSBytes, 10)
		if u.GPUSeconds != 0 {
			b = append(b, `,"gpu_seconds":`...)
			b = appendFloat(b, u.GPUSeconds, ok)
		}
		b = append(b, '}')
	}
	return append(b, '}')
}

func appendTransition(b []byte, t *apitypes.Transition, ok *bool) []byte {
	b = append(b, `{"at":`...)
	b = appendTime(b, t.At, ok)
	b = appendKeyString(b, `,"from":`, t.From)
	b = appendKeyString(b, `,"to":`, t.To)
	if t.Attempt != 0 {
		b = append(b, `,"attempt":`...)
		b = strconv.AppendInt(b, int64(t.Attempt), 10)
	}
	b = appendKeyString(b, `,"actor":`, t.Actor)
	b = appendOmitString(b, `,"reason":`, t.Reason)
	b = appendOmitString(b, `,"message":`, t.Message)
	return append(b, '}')
}

func appendKeyString(b []byte, key, s string) []byte {
	return appendString(append(b, key...), s)
}

// appendOmitString is appendKeyString of an omitempty field.
func appendOmitString(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	return appendKeyString(b, key, s)
}

// appendOmitTime appends an omitempty *time.Time field.
func appendOmitTime(b []byte, key string, t *time.Time, ok *bool) []byte {
	if t == nil {
		return b
	}
	return appendTime(append(b, key...), *t, ok)
}

// appendTime appends t as time.Time's MarshalJSON does; a time it refuses
// clears *ok.
func appendTime(b []byte, t time.Time, ok *bool) []byte {
	b = append(b, '"')
	n0 := len(b)
	b = t.AppendFormat(b, time.RFC3339Nano)
	// MarshalJSON's checks: a four-digit year, a zone hour below 24.
	switch {
	case b[n0+len("9999")] != '-':
		*ok = false
	case b[len(b)-1] != 'Z':
		c := b[len(b)-len("Z07:00")]
		h := 10*(b[len(b)-len("07:00")]-'0') + b[len(b)-len("7:00")] - '0'
		if ('0' <= c && c <= '9') || h >= 24 {
			*ok = false
		}
	}
	return append(b, '"')
}

// appendFloat appends f as encoding/json does; NaN and the infinities
// clear *ok.
func appendFloat(b []byte, f float64, ok *bool) []byte {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		*ok = false
		return b
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' { // e-09 to e-9
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// appendRaw appends a json.RawMessage as encoding/json does: compacted,
// with <, >, &, U+2028 and U+2029 escaped; invalid JSON clears *ok.
func appendRaw(b []byte, raw json.RawMessage, ok *bool) []byte {
	n0 := len(b)
	out := bytes.NewBuffer(b)
	if err := json.Compact(out, raw); err != nil {
		*ok = false
		return b
	}
	b = out.Bytes()
	for _, c := range b[n0:] {
		if c == '<' || c == '>' || c == '&' || c == 0xE2 { // 0xE2 starts U+2028 and U+2029
			compact := append([]byte(nil), b[n0:]...)
			out = bytes.NewBuffer(b[:n0])
			json.HTMLEscape(out, compact)
			return out.Bytes()
		}
	}
	return b
}

// jsonSafe holds the bytes encoding/json writes as they are: printable
// ASCII but for the quote, the backslash and the HTML characters it
// escapes.
var jsonSafe = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = true
	}
	for _, c := range `"\<>&` {
		t[c] = false
	}
	return t
}()

// appendString appends s as a JSON string as encoding/json does with
// HTML escaping on (its default).
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if jsonSafe[c] {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
