package service

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"trainyard/internal/domain"
)

// MaxCompareJobs is the most jobs one comparison takes.
const MaxCompareJobs = 20

// Comparison is jobs side by side (Compare): each job's summary, in the
// order asked, and the fields of their specs that differ.
type Comparison struct {
	Jobs []ComparedJob
	// Differences are the spec fields whose values are not the same in
	// every job: params.* first, then the rest, each group by path.
	Differences []SpecDifference
}

// ComparedJob is one job of a comparison.
type ComparedJob struct {
	// Job is the job as Get returns it (Spec decoded, Code filled).
	Job domain.Job
	// RunTime is the time its attempts ran, summed: each from its start
	// to its end, or to now while it runs. Queueing, backoff between
	// attempts and attempts that never started add nothing. It is the
	// time the job's cost is priced on.
	RunTime time.Duration
	// Cost is what its attempts cost so far at its pool's rates, as Get
	// prices it; Priced is false when the pool has no rates.
	Cost   domain.Money
	Priced bool
	// Metrics summarises each training metric the job reported, by key.
	Metrics []MetricSummary
}

// MetricSummary is one metric series of a job in three numbers: its value
// at its highest step (the latest report of that step: a resumed attempt
// that repeats steps does not hide how far the job got), and its lowest
// and highest value at any step.
type MetricSummary struct {
	Key      string
	LastStep int64
	Last     float64
	Min, Max float64
}

// SpecDifference is one spec field that differs: its dotted path
// ("params.lr", "resources.gpus", "policy.retries") and each job's value
// as JSON, in the order of Comparison.Jobs; nil where a job's spec has no
// such field. Lists ("entrypoint", "inputs", "secrets") are one value each.
type SpecDifference struct {
	Path   string
	Values []json.RawMessage
}

// Compare sets 2 to MaxCompareJobs jobs side by side. The caller must be
// able to read every one of them: a job they may not read answers as a
// missing one does, exactly as Get.
func (s *JobService) Compare(ctx context.Context, p Principal, ids []int64) (Comparison, error) {
	var errs domain.FieldErrors
	switch {
	case len(ids) < 2:
		errs.Add("jobs", "names %d job(s); name 2 to %d jobs to compare, e.g. 12,13", len(ids), MaxCompareJobs)
		return Comparison{}, errs
	case len(ids) > MaxCompareJobs:
		errs.Add("jobs", "names %d jobs; compare at most %d at a time", len(ids), MaxCompareJobs)
		return Comparison{}, errs
	}
	for i, id := range ids {
		if id < 1 {
			errs.Add("jobs", "%d is not a job id (1 or more)", id)
		} else if slices.Contains(ids[:i], id) {
			errs.Add("jobs", "names job %d twice; name each job once", id)
		}
	}
	if err := errs.Err(); err != nil {
		return Comparison{}, err
	}
	now := s.cfg.Clock.Now()
	out := Comparison{Jobs: make([]ComparedJob, len(ids))}
	flat := make([]map[string]json.RawMessage, len(ids))
	for i, id := range ids {
		d, err := s.Get(ctx, p, id) // authorizes job.read; not readable answers as not found
		if err != nil {
			return Comparison{}, err
		}
		c := ComparedJob{Job: d.Job, Cost: d.Cost, Priced: d.Priced}
		for _, a := range d.Attempts {
			if a.StartedAt.IsZero() {
				continue
			}
			end := a.FinishedAt
			if end.IsZero() {
				end = now
			}
			c.RunTime += max(end.Sub(a.StartedAt), 0)
		}
		if c.Metrics, err = s.metricSummaries(ctx, id); err != nil {
			return Comparison{}, err
		}
		if flat[i], err = flattenSpec(d.Job.SpecJSON); err != nil {
			return Comparison{}, fmt.Errorf("read the config snapshot %s of job %d: %w", d.Job.SpecHash, id, err)
		}
		out.Jobs[i] = c
	}
	out.Differences = specDifferences(flat)
	return out, nil
}

// metricSummaries summarises each of a job's metric series. The store
// keeps every series' last, lowest and highest point when it downsamples
// (store.Metrics.QueryMetrics), so three points per series are exact.
func (s *JobService) metricSummaries(ctx context.Context, jobID int64) ([]MetricSummary, error) {
	series, err := s.st.QueryMetrics(ctx, jobID, "", 3)
	if err != nil {
		return nil, fmt.Errorf("read the metrics of job %d: %w", jobID, err)
	}
	out := make([]MetricSummary, 0, len(series))
	for k, pts := range series {
		if len(pts) == 0 {
			continue
		}
		last := pts[len(pts)-1]
		m := MetricSummary{Key: k, LastStep: last.Step, Last: last.Value, Min: last.Value, Max: last.Value}
		for _, pt := range pts {
			m.Min, m.Max = min(m.Min, pt.Value), max(m.Max, pt.Value)
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b MetricSummary) int { return cmp.Compare(a.Key, b.Key) })
	return out, nil
}

// flattenSpec maps a spec's canonical JSON to its fields by dotted path:
// objects are walked, every other value (lists included) is one field. A
// null, an empty list and an empty object are no field at all, so that a
// spec that leaves a field out and one that sets it empty do not differ.
func flattenSpec(specJSON []byte) (map[string]json.RawMessage, error) {
	var root map[string]json.RawMessage
	if err := json.Unmarshal(specJSON, &root); err != nil {
		return nil, err
	}
	out := map[string]json.RawMessage{}
	var walk func(prefix string, obj map[string]json.RawMessage) error
	walk = func(prefix string, obj map[string]json.RawMessage) error {
		for k, v := range obj {
			path := prefix + k
			v = bytes.TrimSpace(v)
			switch {
			case len(v) == 0 || string(v) == "null":
			case v[0] == '{':
				var sub map[string]json.RawMessage
				if err := json.Unmarshal(v, &sub); err != nil {
					return err
				}
				if err := walk(path+".", sub); err != nil {
					return err
				}
			default:
				var buf bytes.Buffer
				if err := json.Compact(&buf, v); err != nil {
					return err
				}
				if buf.String() != "[]" {
					out[path] = buf.Bytes()
				}
			}
		}
		return nil
	}
	return out, walk("", root)
}

// specDifferences lists the paths whose values are not the same in every
// spec of flat: params.* first, then the rest, each group sorted.
func specDifferences(flat []map[string]json.RawMessage) []SpecDifference {
	seen := map[string]bool{}
	var paths []string
	for _, f := range flat {
		for k := range f {
			if !seen[k] {
				seen[k] = true
				paths = append(paths, k)
			}
		}
	}
	slices.SortFunc(paths, func(a, b string) int {
		pa, pb := strings.HasPrefix(a, "params."), strings.HasPrefix(b, "params.")
		if pa != pb {
			if pa {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	out := []SpecDifference{}
	for _, path := range paths {
		vals := make([]json.RawMessage, len(flat))
		same := true
		for i, f := range flat {
			vals[i] = f[path] // nil when absent; no value is empty
			if !bytes.Equal(vals[i], vals[0]) {
				same = false
			}
		}
		if !same {
			out = append(out, SpecDifference{Path: path, Values: vals})
		}
	}
	return out
}
