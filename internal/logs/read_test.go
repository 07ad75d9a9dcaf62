package logs

import (
	"math/rand/v2"
	"testing"
	"time"
)

// timeShapeNaive is timeShape byte by byte.
func timeShapeNaive(b []byte) bool {
	if len(b) != len(TimeFormat) {
		return false
	}
	for i, c := range b {
		switch TimeFormat[i] {
		case '-', 'T', ':', '.', 'Z':
			if c != TimeFormat[i] {
				return false
			}
		default:
			if c < '0' || c > '9' {
				return false
			}
		}
	}
	return true
}

// timeShape, eight bytes at a time, agrees with a byte by byte check on
// times with one or two bytes changed to any value.
func TestTimeShape(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	base := []byte(time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC).Format(TimeFormat))
	if !timeShape(base) {
		t.Fatalf("timeShape(%q) = false", base)
	}
	for i := range base {
		for c := range 256 {
			b := append([]byte(nil), base...)
			b[i] = byte(c)
			if got, want := timeShape(b), timeShapeNaive(b); got != want {
				t.Fatalf("timeShape(%q) = %v, want %v", b, got, want)
			}
		}
	}
	for range 100_000 {
		b := append([]byte(nil), base...)
		b[r.IntN(len(b))] = byte(r.IntN(256))
		b[r.IntN(len(b))] = byte(r.IntN(256))
		if got, want := timeShape(b), timeShapeNaive(b); got != want {
			t.Fatalf("timeShape(%q) = %v, want %v", b, got, want)
		}
	}
}

// splitLine finds the stream however long it is.
func TestSplitLineStreams(t *testing.T) {
	ts := "2026-01-02T03:04:05.000000006Z "
	for line, want := range map[string][3]string{
		ts + "stdout hello world": {"stdout", "hello world"},
		ts + "system x":           {"system", "x"},
		ts + "out hello world":    {"out", "hello world"},
		ts + "stdouts hi":         {"stdouts", "hi"},
		ts + "std ut hi":          {"std", "ut hi"},
		ts + "stdout":             {"stdout", ""},
		ts + "stdout ":            {"stdout", ""},
		ts + " stdout x":          {"", "stdout x"},
	} {
		_, stream, text, ok := splitLine([]byte(line))
		if !ok || string(stream) != want[0] || string(text) != want[1] {
			t.Errorf("splitLine(%q) = %q, %q, %v; want %q, %q", line, stream, text, ok, want[0], want[1])
		}
	}
}
