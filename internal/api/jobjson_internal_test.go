package api

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
)

// encodeStd is what encoding/json's Encoder writes for v.
func encodeStd(t *testing.T, v any) ([]byte, error) {
	t.Helper()
	var buf bytes.Buffer
	err := json.NewEncoder(&buf).Encode(v)
	return buf.Bytes(), err
}

// fill sets every field reachable from v (a settable value) to a non-zero
// value derived from n, so that a field the fast encoder does not know
// shows up as a difference.
func fill(v reflect.Value, n int) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("s" + strings.Repeat("x", n%3) + ` <&> "q" \ é` + "\u2028\t\x01")
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(n*7 + 1))
	case reflect.Float64:
		v.SetFloat(float64(n) + 0.25)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), n+1)
	case reflect.Slice:
		if v.Type() == reflect.TypeFor[json.RawMessage]() {
			v.SetBytes([]byte(`{ "entrypoint": ["a", "<b>"], "n": 1.5 }`))
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			fill(v.Index(i), n+i+1)
		}
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2026, 3, 1, 12, 0, n, n*1000, time.UTC)))
			return
		}
		for i := range v.NumField() {
			fill(v.Field(i), n+i)
		}
	default:
		panic("fill: no value for a " + v.Type().String())
	}
}

func TestJobJSONMatches(t *testing.T) {
	var full apitypes.Job
	fill(reflect.ValueOf(&full).Elem(), 1)
	zone := time.FixedZone("", -(3*3600 + 30*60))
	odd := apitypes.Job{ID: -1, Name: "\xff\xfe bad utf-8, \u2029, \x7f, \u00e9", SubmittedAt: time.Date(9999, 12, 31, 23, 59, 59, 999999999, zone),
		UpdatedAt: time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC), Resources: apitypes.Resources{CPUs: 1e-7, Memory: ""},
		Spec: json.RawMessage("[\n 1 ,\n\t\"\u2028\" ]"), Warnings: []string{}, Attempts: []apitypes.Attempt{}, Created: new(bool)}
	jobs := []apitypes.Job{full, {}, odd}
	for _, f := range []float64{0, math.Copysign(0, -1), 1, -0.5, 123.456, 1e20, 1e21, 1e-6, 9.99e-7, 5e-324, math.MaxFloat64, 1e-10} {
		jobs = append(jobs, apitypes.Job{Resources: apitypes.Resources{CPUs: f}, Sizing: &apitypes.Sizing{UsedCPUs: f, UsedGPUs: -f}})
	}
	var values []any
	for _, j := range jobs {
		values = append(values, j)
	}
	for i, v := range values {
		want, err := encodeStd(t, v)
		if err != nil {
			t.Fatalf("value %d: encoding/json: %v", i, err)
		}
		got, ok := appendFast(nil, v)
		if !ok || !bytes.Equal(got, want) {
			t.Errorf("value %d: fast encoding (ok %v)\n%s\nencoding/json\n%s", i, ok, got, want)
		}
	}
	if _, ok := appendFast(nil, apitypes.Version{}); ok {
		t.Errorf("appendFast took a value that is not a job")
	}
}

// A page converted a job at a time encodes as its whole list does, in
// either encoder.
func TestJobPageMatches(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 1, 2000, time.UTC)
	full := domain.Job{ID: 3, Name: `n <&> "q"`, Project: "p", Pool: "default", State: domain.JobFailed, Reason: domain.ReasonPreempted,
		Message: "m\t\x01", Priority: "high", Submitter: "u", SubmittedAt: at, UpdatedAt: at, StartedAt: at, FinishedAt: at,
		Resources: domain.Resources{GPUs: 2, CPUs: 1.5, Memory: 1 << 30, Nodes: 2}, SpecHash: "sha256:x", OutputDir: "/o",
		Attempts: 3, CancelRequested: true, Preemptions: 1, Code: &domain.CodeRef{SHA256: "c", Commit: "d", Dirty: true}, RerunOf: 2}
	odd := domain.Job{ID: 7, Name: "<b>\u2028\xff", Resources: domain.Resources{CPUs: 1e21}, StartedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)}
	for _, p := range []jobPage{
		{jobs: nil},
		{jobs: []domain.Job{full, {}, odd}, cursor: "42"},
		{jobs: []domain.Job{odd}},
	} {
		p.dto = func(j *domain.Job, i int) apitypes.Job {
			out := jobDTO(j)
			if i%2 == 0 {
				out.Cost, out.Currency = domain.Money(i*1234567).String(), "EUR"
			}
			return out
		}
		want, err := encodeStd(t, p.list())
		if err != nil {
			t.Fatal(err)
		}
		if viaMarshaler, err := encodeStd(t, p); err != nil || !bytes.Equal(viaMarshaler, want) {
			t.Errorf("%d jobs: encoding/json of the page\n%s\nof its list\n%s", len(p.jobs), viaMarshaler, want)
		}
		if got, ok := appendFast(nil, p); !ok || !bytes.Equal(got, want) {
			t.Errorf("%d jobs: fast encoding (ok %v)\n%s\nencoding/json\n%s", len(p.jobs), ok, got, want)
		}
	}
	nan := jobPage{jobs: []domain.Job{{Resources: domain.Resources{CPUs: math.NaN()}}}, dto: func(j *domain.Job, _ int) apitypes.Job { return jobDTO(j) }}
	if _, ok := appendFast(nil, nan); ok {
		t.Errorf("the fast encoder took a NaN")
	}
}

// TestJobJSONRefuses: what encoding/json refuses, the fast encoder leaves
// to it.
func TestJobJSONRefuses(t *testing.T) {
	late := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	for name, j := range map[string]apitypes.Job{
		"NaN":          {Resources: apitypes.Resources{CPUs: math.NaN()}},
		"Inf":          {Sizing: &apitypes.Sizing{HeldSeconds: math.Inf(1)}},
		"year 10000":   {Attempts: []apitypes.Attempt{{StartedAt: &late}}},
		"year -1":      {UpdatedAt: time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)},
		"zone hour 24": {SubmittedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", 24*3600))},
		"invalid spec": {Spec: json.RawMessage(`{"a":`)},
	} {
		if _, err := encodeStd(t, j); err == nil {
			t.Errorf("%s: encoding/json took it; the case tests nothing", name)
		}
		if _, ok := appendFast(nil, j); ok {
			t.Errorf("%s: the fast encoder took it", name)
		}
	}
}

// appendString writes every byte, and every rune up to U+3000, as
// encoding/json does, alone and between plain text.
func TestAppendStringMatches(t *testing.T) {
	var cases []string
	for c := range 256 {
		cases = append(cases, string([]byte{byte(c)}))
	}
	for r := rune(0x80); r < 0x3000; r++ {
		cases = append(cases, string(r))
	}
	// Each case at each place of a plain text that the encoder reads
	// eight bytes at a time, and two of them in one word.
	plain := "abcdefghijklmnopqrstuvw"
	for _, c := range cases {
		tests := []string{c, "ab" + c + "cd"}
		for at := range 17 {
			tests = append(tests, plain[:at]+c+plain[at:], plain[:at]+c+"x"+c+plain[at:])
		}
		for _, s := range tests {
			want, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			if got := appendString(nil, s); !bytes.Equal(got, want) {
				t.Errorf("appendString(%q) = %s, encoding/json %s", s, got, want)
			}
		}
	}
}
