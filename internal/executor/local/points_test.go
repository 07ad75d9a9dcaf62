package local

import (
	"cmp"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/logs"
)

func writeMetricLog(t *testing.T, b []byte) *os.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), metricsFile)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// The metric log's records become points with the values printed: the
// current records (reports stored as printed) and those of an earlier
// supervisor (parsed records) alike; other lines are skipped and an
// incomplete last line is left for the next read.
func TestReadPoints(t *testing.T) {
	t0 := time.Date(2026, 5, 6, 7, 8, 9, 123456789, time.UTC)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }
	var b []byte
	b = append(b, `{"t":`+strconv.FormatInt(at(1).UnixNano(), 10)+`,"step":1,"m":{"loss":0.9}}`+"\n"...)
	b = logs.AppendMetricRecords(b, at(2), [][]byte{[]byte(`{"step": 2, "loss": 0.8, "acc": 0.6, "phase": "train"}`)})
	b = append(b, "not a record\n"...)
	b = logs.AppendMetricRecords(b, at(3), [][]byte{[]byte(`{"step":3,"loss":0.75,"loss":7e-1}`)})
	complete := len(b)
	b = append(b, `{"t":1,"p":{"step": 4, "loss": 0.1`...) // still being written
	ref := executor.Ref{JobID: 7, Attempt: 2}
	points, n, step, last := readPoints(writeMetricLog(t, b), 0, ref, nil)
	want := []domain.MetricPoint{
		{JobID: 7, Attempt: 2, Step: 1, Key: "loss", Value: 0.9, At: at(1)},
		{JobID: 7, Attempt: 2, Step: 2, Key: "loss", Value: 0.8, At: at(2)},
		{JobID: 7, Attempt: 2, Step: 2, Key: "acc", Value: 0.6, At: at(2)},
		{JobID: 7, Attempt: 2, Step: 3, Key: "loss", Value: 0.7, At: at(3)},
	}
	if len(points) != len(want) {
		t.Fatalf("points %+v, want %+v", points, want)
	}
	// Within one report the order of keys is not kept (a report the fast
	// scanner cannot read is decoded into a map): compare by step and key.
	byStepKey := func(a, b domain.MetricPoint) int {
		return cmp.Or(cmp.Compare(a.Step, b.Step), strings.Compare(a.Key, b.Key))
	}
	slices.SortStableFunc(points, byStepKey)
	slices.SortStableFunc(want, byStepKey)
	for i, p := range want {
		if g := points[i]; g.JobID != p.JobID || g.Attempt != p.Attempt || g.Step != p.Step || g.Key != p.Key || g.Value != p.Value || !g.At.Equal(p.At) {
			t.Errorf("point %d = %+v, want %+v", i, g, p)
		}
	}
	if n != int64(complete) || step != 3 || !last.Equal(at(3)) {
		t.Errorf("read %d bytes up to step %d at %v, want %d bytes, step 3 at %v", n, step, last, complete, at(3))
	}
	// From where it stopped: nothing new until the last line is complete.
	if points, n, _, _ := readPoints(writeMetricLog(t, b), int64(complete), ref, nil); len(points) != 0 || n != 0 {
		t.Errorf("incomplete line read as %d points, %d bytes", len(points), n)
	}
}

// Reports of several ranks printed together (same step, same time) each
// keep their values: rank N > 0 files under "<key>/rankN".
func TestReadPointsPerRank(t *testing.T) {
	at := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	b := logs.AppendMetricRecords(nil, at, [][]byte{
		[]byte(`{"step": 10, "loss": 0.5, "rank": 0}`),
		[]byte(`{"step": 10, "loss": 0.6, "rank": 1}`),
		[]byte(`{"step": 10, "loss": 0.7, "rank": 2}`),
	})
	points, _, _, _ := readPoints(writeMetricLog(t, b), 0, executor.Ref{JobID: 1, Attempt: 1}, nil)
	got := map[string]float64{}
	for _, p := range points {
		got[p.Key] = p.Value
	}
	want := map[string]float64{"loss": 0.5, "loss/rank1": 0.6, "loss/rank2": 0.7}
	if len(got) != len(want) {
		t.Fatalf("points %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}

// A line longer than any report is skipped whole, and the records after
// it are read.
func TestReadPointsSkipsOverlongLine(t *testing.T) {
	at := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	b := []byte(strings.Repeat("x", 3*maxLine) + "\n")
	b = logs.AppendMetricRecords(b, at, [][]byte{[]byte(`{"step": 5, "loss": 0.5}`)})
	points, n, _, _ := readPoints(writeMetricLog(t, b), 0, executor.Ref{JobID: 1, Attempt: 1}, nil)
	if len(points) != 1 || points[0].Step != 5 || n != int64(len(b)) {
		t.Errorf("got %+v after reading %d of %d bytes, want the step-5 point and every byte", points, n, len(b))
	}
}

// More points than one event may carry are split across reads.
func TestReadPointsBatches(t *testing.T) {
	at := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	var payloads [][]byte
	for i := range executor.MaxPoints + 10 {
		payloads = append(payloads, []byte(`{"step": `+strconv.Itoa(i)+`, "loss": 1}`))
	}
	f := writeMetricLog(t, logs.AppendMetricRecords(nil, at, payloads))
	ref := executor.Ref{JobID: 1, Attempt: 1}
	first, n, _, _ := readPoints(f, 0, ref, nil)
	rest, _, step, _ := readPoints(f, n, ref, nil)
	if len(first) != executor.MaxPoints || len(rest) != 10 || step != int64(executor.MaxPoints+9) {
		t.Errorf("reads of %d and %d points up to step %d, want %d and 10 up to %d", len(first), len(rest), step, executor.MaxPoints, executor.MaxPoints+9)
	}
}
