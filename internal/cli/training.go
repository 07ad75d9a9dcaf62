package cli

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"trainyard/internal/api/apitypes"
)

// sparkWidth is the most characters a sparkline takes.
const sparkWidth = 40

func (a *app) metricsCmd() *cobra.Command {
	var (
		key       string
		maxPoints int
	)
	cmd := &cobra.Command{
		Use:   "metrics ID [ID...]",
		Short: "Show a job's training metrics, or overlay several jobs'",
		Long: `Show the training metrics a job reported (stdout lines
'trainyard: {"step": 100, "loss": 0.53}' or the Python SDK): per metric a
sparkline of its values by step, then the last, lowest and highest value.
-o json prints the API's series; -o csv prints key,step,value,at,attempt rows.

With several job ids (up to 20) the curves are overlaid: per metric (or only
--key) one sparkline per job, all drawn on one scale (the steps and values
of every job together), so that their shapes compare; a job that ran fewer
steps ends early. Each line ends with the job's step range and its first,
last, lowest and highest value. -o csv then prints
job,key,step,value,at,attempt rows for plotting; -o json a list of
{"job": ID, "series": ...}.

Long series are downsampled by the server to about --max points per metric,
keeping each step bucket's last, lowest and highest value.`,
		Example: `  trainyard metrics 12
  trainyard metrics 12 --key loss -o csv
  trainyard metrics 12 13 14 --key loss
  trainyard metrics 12 13 --key loss -o csv > loss.csv`,
		Args: jobsArgs(1, maxCompareJobs),
	}
	cmd.Flags().StringVar(&key, "key", "", "only this metric (default: all)")
	cmd.Flags().IntVar(&maxPoints, "max", 0, "at most about this many points per metric (default: the server's, 500)")
	output, checkOutput := outputFlag(cmd, formatCSV)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(); err != nil {
			return err
		}
		ids, err := parseIDs(args)
		if err != nil {
			return err
		}
		if maxPoints < 0 {
			return usageErrorf("invalid --max %d: want a positive number", maxPoints)
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if len(ids) > 1 {
			jobs := make([]jobMetrics, len(ids))
			for i, id := range ids {
				series, err := c.Metrics(cmd.Context(), id, key, maxPoints)
				if err != nil {
					return err
				}
				if series.Series == nil {
					series.Series = map[string][]apitypes.MetricPoint{}
				}
				jobs[i] = jobMetrics{Job: id, Series: series.Series}
			}
			if *output == formatCSV {
				return writeOverlayCSV(out, jobs)
			}
			if ok, err := writeStructured(out, *output, jobs); ok {
				return err
			}
			writeOverlay(out, jobs, key)
			return nil
		}
		id := ids[0]
		series, err := c.Metrics(cmd.Context(), id, key, maxPoints)
		if err != nil {
			return err
		}
		if *output == formatCSV {
			return writeMetricsCSV(out, series)
		}
		if series.Series == nil {
			series.Series = map[string][]apitypes.MetricPoint{}
		}
		if ok, err := writeStructured(out, *output, series); ok {
			return err
		}
		if len(series.Series) == 0 {
			fmt.Fprintf(out, "job %d has reported no metrics", id)
			if key != "" {
				fmt.Fprintf(out, " named %q", key)
			}
			fmt.Fprintln(out, `; a job reports them by printing 'trainyard: {"step": N, "loss": 0.5}' lines or through the Python SDK`)
			return nil
		}
		writeMetricsTable(out, series)
		return nil
	}
	return cmd
}

func sortedSeries(s apitypes.MetricSeries) []string {
	keys := make([]string, 0, len(s.Series))
	for k := range s.Series {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func writeMetricsCSV(w io.Writer, s apitypes.MetricSeries) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"key", "step", "value", "at", "attempt"})
	for _, k := range sortedSeries(s) {
		for _, p := range s.Series[k] {
			_ = cw.Write([]string{k, strconv.FormatInt(p.Step, 10), strconv.FormatFloat(p.Value, 'g', -1, 64),
				p.At.UTC().Format(time.RFC3339Nano), strconv.Itoa(p.Attempt)})
		}
	}
	cw.Flush()
	return cw.Error()
}

// writeMetricsTable prints one line per metric: name, sparkline, step range,
// last, min and max.
func writeMetricsTable(w io.Writer, s apitypes.MetricSeries) {
	keys := sortedSeries(s)
	width := len("METRIC")
	for _, k := range keys {
		width = max(width, len(oneLine(k)))
	}
	fmt.Fprintf(w, "%-*s  %-*s  %-13s  %12s  %12s  %12s\n", width, "METRIC", sparkWidth, "TREND", "STEPS", "LAST", "MIN", "MAX")
	for _, k := range keys {
		pts := s.Series[k]
		if len(pts) == 0 {
			continue
		}
		vals := make([]float64, len(pts))
		lo, hi := math.Inf(1), math.Inf(-1)
		for i, p := range pts {
			vals[i] = p.Value
			lo, hi = min(lo, p.Value), max(hi, p.Value)
		}
		line := Sparkline(vals, sparkWidth)
		steps := fmt.Sprintf("%d-%d", pts[0].Step, pts[len(pts)-1].Step)
		fmt.Fprintf(w, "%-*s  %s%s  %-13s  %12s  %12s  %12s\n", width, oneLine(k), line,
			strings.Repeat(" ", sparkWidth-len([]rune(line))), steps,
			fmtValue(pts[len(pts)-1].Value), fmtValue(lo), fmtValue(hi))
	}
}

func fmtValue(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }

// sparkBlocks are the eight levels of a sparkline, lowest first.
var sparkBlocks = []rune("▁▂▃▄▅▆▇█")

// Sparkline draws values as at most width block characters (values are
// averaged into width columns when there are more), scaled from the lowest
// to the highest value; a flat series is drawn at the lowest level.
func Sparkline(values []float64, width int) string {
	if len(values) == 0 || width <= 0 {
		return ""
	}
	cols := values
	if len(values) > width {
		cols = make([]float64, width)
		for c := range width {
			from, to := c*len(values)/width, (c+1)*len(values)/width
			var sum float64
			for _, v := range values[from:to] {
				sum += v
			}
			cols[c] = sum / float64(to-from)
		}
	}
	lo, hi := slices.Min(cols), slices.Max(cols)
	var b strings.Builder
	for _, v := range cols {
		level := 0
		if hi > lo {
			level = int((v - lo) / (hi - lo) * float64(len(sparkBlocks)-1))
		}
		b.WriteRune(sparkBlocks[min(max(level, 0), len(sparkBlocks)-1)])
	}
	return b.String()
}

// jobMetrics is one job's series in the view of several jobs' metrics.
type jobMetrics struct {
	Job    int64                             `json:"job"`
	Series map[string][]apitypes.MetricPoint `json:"series"`
}

// writeOverlayCSV writes several jobs' series as job,key,step,value,at,attempt
// rows: the long format plotting tools read.
func writeOverlayCSV(w io.Writer, jobs []jobMetrics) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"job", "key", "step", "value", "at", "attempt"})
	for _, j := range jobs {
		id := strconv.FormatInt(j.Job, 10)
		for _, k := range sortedSeries(apitypes.MetricSeries{Series: j.Series}) {
			for _, p := range j.Series[k] {
				_ = cw.Write([]string{id, k, strconv.FormatInt(p.Step, 10), strconv.FormatFloat(p.Value, 'g', -1, 64),
					p.At.UTC().Format(time.RFC3339Nano), strconv.Itoa(p.Attempt)})
			}
		}
	}
	cw.Flush()
	return cw.Error()
}

// writeOverlay prints, per metric any of the jobs reported, one sparkline
// per job, every job's drawn on the same scale of steps and values.
func writeOverlay(w io.Writer, jobs []jobMetrics, key string) {
	var keys []string
	for _, j := range jobs {
		for k := range j.Series {
			if len(j.Series[k]) > 0 && !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	if len(keys) == 0 {
		ids := make([]string, len(jobs))
		for i, j := range jobs {
			ids[i] = strconv.FormatInt(j.Job, 10)
		}
		fmt.Fprintf(w, "jobs %s have reported no metrics", strings.Join(ids, ", "))
		if key != "" {
			fmt.Fprintf(w, " named %q", key)
		}
		fmt.Fprintln(w, `; a job reports them by printing 'trainyard: {"step": N, "loss": 0.5}' lines or through the Python SDK`)
		return
	}
	slices.Sort(keys)
	for n, k := range keys {
		if n > 0 {
			fmt.Fprintln(w)
		}
		loStep, hiStep := int64(math.MaxInt64), int64(math.MinInt64)
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, j := range jobs {
			for _, p := range j.Series[k] {
				loStep, hiStep = min(loStep, p.Step), max(hiStep, p.Step)
				lo, hi = min(lo, p.Value), max(hi, p.Value)
			}
		}
		fmt.Fprintf(w, "%s: every job on one scale, steps %d to %d, values %s to %s\n", oneLine(k), loStep, hiStep, fmtValue(lo), fmtValue(hi))
		tw := newTable(w)
		fmt.Fprintln(tw, "  JOB\tTREND\tSTEPS\tFIRST\tLAST\tMIN\tMAX")
		for _, j := range jobs {
			pts := j.Series[k]
			if len(pts) == 0 {
				fmt.Fprintf(tw, "  %d\t%s\t-\t-\t-\t-\t-\n", j.Job, padRunes("(none)", sparkWidth))
				continue
			}
			jlo, jhi := math.Inf(1), math.Inf(-1)
			for _, p := range pts {
				jlo, jhi = min(jlo, p.Value), max(jhi, p.Value)
			}
			line := overlaySparkline(pts, loStep, hiStep, lo, hi, sparkWidth)
			fmt.Fprintf(tw, "  %d\t%s\t%d-%d\t%s\t%s\t%s\t%s\n", j.Job, padRunes(line, sparkWidth), pts[0].Step, pts[len(pts)-1].Step,
				fmtValue(pts[0].Value), fmtValue(pts[len(pts)-1].Value), fmtValue(jlo), fmtValue(jhi))
		}
		tw.Flush()
	}
}

// padRunes pads s with spaces to n characters.
func padRunes(s string, n int) string {
	return s + strings.Repeat(" ", max(n-len([]rune(s)), 0))
}

// overlaySparkline draws a series ordered by step on a scale shared with
// other series: at most width columns over the steps loStep to hiStep
// (one per step when there are fewer), levels from lo to hi. A column of
// several points shows their mean; one without points inside the series'
// steps repeats the column before it; one outside them is blank.
func overlaySparkline(pts []apitypes.MetricPoint, loStep, hiStep int64, lo, hi float64, width int) string {
	if len(pts) == 0 || width <= 0 || hiStep < loStep {
		return ""
	}
	span := float64(hiStep-loStep) + 1
	width = int(min(float64(width), span))
	sum, cnt := make([]float64, width), make([]int, width)
	first, last := width, -1
	for _, p := range pts {
		c := min(max(int(float64(p.Step-loStep)/span*float64(width)), 0), width-1)
		sum[c] += p.Value
		cnt[c]++
		first, last = min(first, c), max(last, c)
	}
	var b strings.Builder
	prev := ' '
	for c := range width {
		switch {
		case c < first || c > last:
			b.WriteRune(' ')
			continue
		case cnt[c] > 0:
			level := 0
			if hi > lo {
				level = int((sum[c]/float64(cnt[c]) - lo) / (hi - lo) * float64(len(sparkBlocks)-1))
			}
			prev = sparkBlocks[min(max(level, 0), len(sparkBlocks)-1)]
		}
		b.WriteRune(prev)
	}
	return strings.TrimRight(b.String(), " ")
}
