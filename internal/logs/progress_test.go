package logs

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
)

func metricMap(ms []Metric) map[string]float64 {
	m := map[string]float64{}
	for _, x := range ms {
		m[string(x.Key)] = x.Value
	}
	return m
}

func TestParseProgress(t *testing.T) {
	tests := map[string]struct {
		in   string
		step int64
		m    map[string]float64
		ok   bool
	}{
		"loss":           {`{"step": 100, "loss": 0.53}`, 100, map[string]float64{"loss": 0.53}, true},
		"several":        {`{"step":3,"loss":-1e-3,"acc":1}`, 3, map[string]float64{"loss": -0.001, "acc": 1}, true},
		"non-numeric":    {`{"step": 1, "phase": "eval", "ok": true, "loss": 2}`, 1, map[string]float64{"loss": 2}, true},
		"float step":     {`{"step": 1.5, "loss": 2}`, 0, nil, false},
		"negative step":  {`{"step": -1, "loss": 2}`, 0, nil, false},
		"no step":        {`{"loss": 2}`, 0, nil, false},
		"not json":       {`step 1 loss 2`, 0, nil, false},
		"array":          {`[1, 2]`, 0, nil, false},
		"step only":      {`{"step": 7}`, 7, map[string]float64{}, true},
		"trailing stuff": {`{"step": 1} extra`, 0, nil, false},
		"escaped key":    {`{"step": 2, "lo\u0073s": 1}`, 2, map[string]float64{"loss": 1}, true},
		"nested":         {`{"step": 2, "x": {"a": 1}, "loss": 3}`, 2, map[string]float64{"loss": 3}, true},
		"bad number":     {`{"step": 2, "loss": 1.2.3}`, 0, nil, false},
		"out of range":   {`{"step": 2, "big": 1e400, "loss": 3}`, 2, map[string]float64{"loss": 3}, true},
		"repeated key":   {`{"step": 2, "loss": 3, "acc": 1, "loss": 4}`, 2, map[string]float64{"loss": 4, "acc": 1}, true},
		"control in key": {"{\"step\": 2, \"a\tb\": 3, \"loss\": 4}", 2, map[string]float64{"loss": 4}, true},
		"bidi in key":    {"{\"step\": 2, \"loss\u202e\": 3, \"acc\": 4}", 2, map[string]float64{"acc": 4}, true},
		"C1 in key":      {"{\"step\": 2, \"a\u009bb\": 3, \"acc\": 4}", 2, map[string]float64{"acc": 4}, true},
		"escaped tab":    {`{"step": 2, "a\tb": 3, "loss": 4}`, 2, map[string]float64{"loss": 4}, true},
		"crlf":           {"{\"step\": 2, \"loss\": 4}\r", 2, map[string]float64{"loss": 4}, true},
		"rank 0":         {`{"step": 10, "loss": 0.5, "rank": 0}`, 10, map[string]float64{"loss": 0.5}, true},
		"rank 1":         {`{"step": 10, "loss": 0.5, "rank": 1, "acc": 2}`, 10, map[string]float64{"loss/rank1": 0.5, "acc/rank1": 2}, true},
		"rank first":     {`{"rank": 12, "step": 10, "loss": 0.5}`, 10, map[string]float64{"loss/rank12": 0.5}, true},
		"rank escaped":   {`{"step": 3, "r\u0061nk": 2, "loss": 1}`, 3, map[string]float64{"loss/rank2": 1}, true},
		"rank only":      {`{"step": 3, "rank": 2}`, 3, map[string]float64{}, true},
		"fraction rank":  {`{"step": 3, "rank": 1.5, "loss": 1}`, 3, map[string]float64{"rank": 1.5, "loss": 1}, true},
		"negative rank":  {`{"step": 3, "rank": -1, "loss": 1}`, 3, map[string]float64{"rank": -1, "loss": 1}, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			step, ms, ok := ParseProgress([]byte(tc.in), nil)
			m := metricMap(ms)
			if ok != tc.ok || (ok && (step != tc.step || len(m) != len(tc.m) || len(ms) != len(m))) {
				t.Fatalf("ParseProgress(%s) = %d %v %v; want %d %v %v", tc.in, step, m, ok, tc.step, tc.m, tc.ok)
			}
			for k, v := range tc.m {
				if m[k] != v {
					t.Errorf("%s = %v, want %v", k, m[k], v)
				}
			}
			if cs, cok := CheckProgress([]byte(tc.in)); cok != tc.ok || (cok && cs != tc.step) {
				t.Errorf("CheckProgress(%s) = %d %v; want %d %v", tc.in, cs, cok, tc.step, tc.ok)
			}
		})
	}
}

// number and parseStep delimit a number as the longest run of number
// bytes and accept exactly what strconv.ParseFloat (a range error
// included) and strconv.ParseInt (0 or more) accept.
func TestNumber(t *testing.T) {
	const alphabet = "-+.eE0123456789,} x"
	check := func(s string) {
		run := strings.IndexFunc(s, func(r rune) bool { return !strings.ContainsRune("-+.eE0123456789", r) })
		if run < 0 {
			run = len(s)
		}
		tok := s[:run]
		_, err := strconv.ParseFloat(tok, 64)
		want := err == nil || errors.Is(err, strconv.ErrRange)
		if end, valid := number([]byte(s), 0); end != run || valid != want {
			t.Errorf("number(%q) = %d %v; want %d %v (ParseFloat error %v)", s, end, valid, run, want, err)
		}
		wantStep, err := strconv.ParseInt(tok, 10, 64)
		wantOK := err == nil && wantStep >= 0
		if n, ok := parseStep([]byte(tok)); ok != wantOK || (ok && n != wantStep) {
			t.Errorf("parseStep(%q) = %d %v; want %d %v", tok, n, ok, wantStep, wantOK)
		}
	}
	for _, s := range []string{"0", "-0", "-00", "1.", "-.5", "1e5", "1e", "1e+", "1E-3,", "01}", "-", "1.2.3", "1e400",
		"--1", "1-", "9223372036854775807", "9223372036854775808", "-9223372036854775808", "12 "} {
		check(s)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 300000 {
		b := make([]byte, 1+r.IntN(8))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		if b[0] == '-' || (b[0] >= '0' && b[0] <= '9') {
			check(string(b))
		}
	}
}

// CheckProgress agrees with ParseProgress on ok and step for any mix of
// the parts that progress reports are made of.
func TestCheckProgressAgrees(t *testing.T) {
	parts := []string{`{`, `}`, `"step"`, `"loss"`, `:`, `,`, ` `, `1`, `-2`, `-0`, `9223372036854775808`, `0.5`, `1e`, `1.2.3`, `"x"`, `true`, `[1]`, `\`, `"a\"b"`, `1e999`}
	r := rand.New(rand.NewPCG(3, 4))
	for range 100000 {
		var b []byte
		if r.IntN(2) == 0 {
			b = append(b, `{"step":`...)
		}
		for range r.IntN(10) {
			b = append(b, parts[r.IntN(len(parts))]...)
		}
		ps, _, pok := ParseProgress(b, nil)
		cs, cok := CheckProgress(b)
		if pok != cok || ps != cs {
			t.Fatalf("%s: ParseProgress %d %v, CheckProgress %d %v", b, ps, pok, cs, cok)
		}
	}
}

func TestMetricRecord(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 890, time.UTC)
	payload := ` {"step": 12, "loss": 0.53217, "lr": 1e-3, "phase": "eval"} `
	recs := AppendMetricRecords([]byte("kept"), at, [][]byte{[]byte(payload), []byte(`{"step":13}`)})
	head := `{"t":` + strconv.FormatInt(at.UnixNano(), 10) + `,"p":`
	if want := "kept" + head + payload + "}\n" + head + `{"step":13}` + "}\n"; string(recs) != want {
		t.Fatalf("records %q, want %q", recs, want)
	}
	rec := recs[len("kept") : len(recs)-len(head+`{"step":13}`+"}\n")]
	for name, line := range map[string]string{
		"current": string(rec),
		// As the supervisor wrote it before reports were stored unparsed;
		// a running supervisor of an earlier version still does.
		"earlier": `{"t":` + strconv.FormatInt(at.UnixNano(), 10) + `,"step":12,"m":{"loss":0.53217,"lr":0.001}}` + "\n",
	} {
		gotAt, step, ms, ok := ParseMetricRecord([]byte(line), nil)
		m := metricMap(ms)
		if !ok || !gotAt.Equal(at) || step != 12 || len(m) != 2 || m["loss"] != 0.53217 || m["lr"] != 0.001 {
			t.Errorf("%s: ParseMetricRecord(%s) = %v %d %v %v", name, line, gotAt, step, m, ok)
		}
	}
	for _, bad := range []string{``, `garbage`, `{"t":1,"p":{"loss":1}}`, `{"t":1,"p":{"step":1}`, `{"t":x,"p":{"step":1}}`} {
		if _, _, ms, ok := ParseMetricRecord([]byte(bad), nil); ok && len(ms) > 0 {
			t.Errorf("ParseMetricRecord(%q) = %v, want no metrics", bad, ms)
		}
	}
}
