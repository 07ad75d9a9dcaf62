package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"trainyard/internal/api/apitypes"
)

// maxCompareJobs is the most jobs compare and metrics take at once, as the
// server (service.MaxCompareJobs).
const maxCompareJobs = 20

// compareWidth is the width the compare table keeps to, and
// compareLabelWidth the most its first column takes.
const (
	compareWidth      = 120
	compareLabelWidth = 24
)

func (a *app) compareCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "compare ID ID [ID...]",
		Short: "Compare jobs side by side: spec differences, run time, cost, metrics",
		Long: `Compare 2 to 20 jobs side by side: a column per job, in the order given.

First each job's name, project, submitter, state, environment (as pinned at
submit), code package (its git commit, or its hash), attempts, run time (its
attempts' run time summed: waiting in the queue or between attempts is not
counted) and cost so far. Then the differences: only the spec fields whose
values are not the same in every job, params first, as dotted paths
(params.lr, resources.gpus, policy.retries); "(absent)" where a job's spec
has no such field. Then per training metric the value at each job's highest
step (with the step), and its lowest and highest value.

Long values are cut to fit the columns; -o json prints them whole, with the
values of differing fields as the JSON in the specs. To overlay the metric
curves, use trainyard metrics with several ids.`,
		Example: `  trainyard compare 12 13
  trainyard compare 12 13 14 -o json | jq '.differences'
  trainyard metrics 12 13 14 --key loss`,
		Args: jobsArgs(2, maxCompareJobs),
	}
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(); err != nil {
			return err
		}
		ids, err := parseIDs(args)
		if err != nil {
			return err
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		cmp, err := c.Compare(cmd.Context(), ids)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if ok, err := writeStructured(out, *output, cmp); ok {
			return err
		}
		writeComparison(out, cmp)
		return nil
	}
	return cmd
}

// jobsArgs takes from lo to hi job ids, with a usage exit code.
func jobsArgs(lo, hi int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < lo || len(args) > hi {
			return usageErrorf("%s takes %d to %d job ids, got %d; usage: %s", cmd.CommandPath(), lo, hi, len(args), cmd.UseLine())
		}
		return nil
	}
}

// parseIDs parses job id arguments; a job named twice is a usage error.
func parseIDs(args []string) ([]int64, error) {
	ids := make([]int64, len(args))
	for i, s := range args {
		id, err := parseID(s)
		if err != nil {
			return nil, err
		}
		if slices.Contains(ids[:i], id) {
			return nil, usageErrorf("job %d is named twice; name each job once", id)
		}
		ids[i] = id
	}
	return ids, nil
}

// clip cuts s to at most n characters, ending it with "…" when cut.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:max(n-1, 0)]) + "…"
}

// writeComparison writes the human view of a comparison: the jobs' summary,
// the spec fields that differ, and the metric summaries, in one table with
// a column per job, the same widths in every section.
func writeComparison(w io.Writer, c apitypes.Comparison) {
	// A row is a label and a cell per job; a row without cells is a
	// section's title, or a blank line.
	type row struct {
		label string
		cells []string
	}
	var rows []row
	add := func(label string, cell func(j apitypes.ComparedJob, i int) string) {
		r := row{label: label, cells: make([]string, len(c.Jobs))}
		for i, j := range c.Jobs {
			r.cells[i] = cell(j, i)
		}
		rows = append(rows, r)
	}
	add("JOB", func(j apitypes.ComparedJob, _ int) string { return strconv.FormatInt(j.ID, 10) })
	add("Name", func(j apitypes.ComparedJob, _ int) string { return cell(j.Name) })
	add("Project", func(j apitypes.ComparedJob, _ int) string { return cell(j.Project) })
	add("Submitter", func(j apitypes.ComparedJob, _ int) string { return cell(j.Submitter) })
	add("State", func(j apitypes.ComparedJob, _ int) string {
		if j.Reason != "" {
			return cell(j.State) + " (" + oneLine(j.Reason) + ")"
		}
		return cell(j.State)
	})
	add("Env", func(j apitypes.ComparedJob, _ int) string { return cell(j.Env) })
	add("Code", func(j apitypes.ComparedJob, _ int) string { return shortCode(j.Code) })
	add("Attempts", func(j apitypes.ComparedJob, _ int) string { return strconv.Itoa(j.Attempts) })
	add("Run time", func(j apitypes.ComparedJob, _ int) string {
		if j.Started == nil {
			return "-"
		}
		return duration(time.Duration(j.RunSeconds * float64(time.Second)))
	})
	costLabel := "Cost"
	if c.Currency != "" {
		costLabel += " (" + oneLine(c.Currency) + ")"
	}
	add(costLabel, func(j apitypes.ComparedJob, _ int) string {
		if j.Cost == "" {
			return "-"
		}
		return cents(j.Cost)
	})

	rows = append(rows, row{})
	if len(c.Differences) == 0 {
		rows = append(rows, row{label: "Differences: none; the specs are the same"})
	} else {
		rows = append(rows, row{label: fmt.Sprintf("Differences (%d):", len(c.Differences))})
		for _, d := range c.Differences {
			add("  "+oneLine(d.Path), func(_ apitypes.ComparedJob, i int) string {
				if i < len(d.Values) {
					return specValue(d.Values[i])
				}
				return "(absent)"
			})
		}
	}

	rows = append(rows, row{})
	var keys []string
	for _, j := range c.Jobs {
		for _, m := range j.Metrics {
			if !slices.Contains(keys, m.Key) {
				keys = append(keys, m.Key)
			}
		}
	}
	if len(keys) == 0 {
		rows = append(rows, row{label: `Metrics: none reported; a job reports them by printing 'trainyard: {"step": N, "loss": 0.5}' lines or through the Python SDK`})
	} else {
		slices.Sort(keys)
		rows = append(rows, row{label: "Metrics (last at its step, lowest, highest):"})
		// The key and the stat share the label's column: "  loss  last".
		keyWidth := 0
		for _, k := range keys {
			keyWidth = max(keyWidth, utf8.RuneCountInString(clip(oneLine(k), compareLabelWidth-8)))
		}
		for _, k := range keys {
			stat := func(name string, f func(m apitypes.MetricSummary) string) {
				key := ""
				if name == "last" {
					key = clip(oneLine(k), compareLabelWidth-8)
				}
				add("  "+padRunes(key, keyWidth)+"  "+name, func(j apitypes.ComparedJob, _ int) string {
					if i := slices.IndexFunc(j.Metrics, func(m apitypes.MetricSummary) bool { return m.Key == k }); i >= 0 {
						return f(j.Metrics[i])
					}
					return "-"
				})
			}
			stat("last", func(m apitypes.MetricSummary) string {
				return fmtValue(m.Last) + " @" + strconv.FormatInt(m.LastStep, 10)
			})
			stat("min ", func(m apitypes.MetricSummary) string { return fmtValue(m.Min) })
			stat("max ", func(m apitypes.MetricSummary) string { return fmtValue(m.Max) })
		}
	}

	// Columns: the label's at most compareLabelWidth, each job's at most
	// its share of compareWidth; what is longer is cut.
	n := max(len(c.Jobs), 1)
	maxCol := max(12, (compareWidth-compareLabelWidth)/n-2)
	labelWidth, widths := 0, make([]int, len(c.Jobs))
	for _, r := range rows {
		if r.cells == nil {
			continue
		}
		labelWidth = max(labelWidth, min(utf8.RuneCountInString(r.label), compareLabelWidth))
		for i, s := range r.cells {
			widths[i] = max(widths[i], min(utf8.RuneCountInString(s), maxCol))
		}
	}
	for _, r := range rows {
		if r.cells == nil {
			fmt.Fprintln(w, r.label)
			continue
		}
		line := padRunes(clip(r.label, compareLabelWidth), labelWidth)
		for i, s := range r.cells {
			line += "  " + padRunes(clip(s, maxCol), widths[i])
		}
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}
}

// specValue renders a spec field's JSON value in one line: a string as its
// text, anything else (numbers, booleans, lists) as its JSON; "(absent)"
// for none.
func specValue(v json.RawMessage) string {
	if len(v) == 0 || string(v) == "null" {
		return "(absent)"
	}
	var s string
	if v[0] == '"' && json.Unmarshal(v, &s) == nil {
		if s == "" {
			return `""`
		}
		return oneLine(s)
	}
	return oneLine(string(v))
}

// shortCode names a code package in a few characters: its commit
// (abbreviated, "+dirty" when the tree differed), or its hash without one.
func shortCode(c *apitypes.CodeRef) string {
	switch {
	case c == nil:
		return "-"
	case c.Commit != "":
		s := c.Commit[:min(len(c.Commit), 12)]
		if c.Dirty {
			s += "+dirty"
		}
		return oneLine(s)
	default:
		return oneLine(c.SHA256[:min(len(c.SHA256), len("sha256:")+12)])
	}
}
