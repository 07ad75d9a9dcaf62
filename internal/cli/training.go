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
		Use:   "metrics ID",
		Short: "Show a job's training metrics",
		Long: `Show the training metrics a job reported (stdout lines
'trainyard: {"step": 100, "loss": 0.53}' or the Python SDK): per metric a
sparkline of its values by step, then the last, lowest and highest value.
-o json prints the API's series; -o csv prints key,step,value,at,attempt rows.

Long series are downsampled by the server to about --max points per metric,
keeping each step bucket's last, lowest and highest value.`,
		Example: `  trainyard metrics 12
  trainyard metrics 12 --key loss -o csv`,
		Args: exactArgs(1),
	}
	cmd.Flags().StringVar(&key, "key", "", "only this metric (default: all)")
	cmd.Flags().IntVar(&maxPoints, "max", 0, "at most about this many points per metric (default: the server's, 500)")
	output, checkOutput := outputFlag(cmd, formatCSV)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(); err != nil {
			return err
		}
		id, err := parseID(args[0])
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
		series, err := c.Metrics(cmd.Context(), id, key, maxPoints)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
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
