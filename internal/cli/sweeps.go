package cli

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/client"
	"trainyard/internal/domain"
)

func (a *app) sweepCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sweep",
		Short: "List, show and cancel sweeps and job arrays",
		Long: `A sweep runs one member job per combination (grid) or draw (random) of its
parameters; a job array runs one member per index. Submit one with
trainyard submit: a spec with a sweep: section, or any spec with --array.
Each member is an ordinary job (list them with trainyard ls --sweep ID) that
gets TRAINYARD_ARRAY_INDEX and TRAINYARD_PARAM_<NAME>. See docs/workflows.md.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.sweepLsCmd(), a.sweepShowCmd(), a.sweepCancelCmd())
	return cmd
}

func (a *app) sweepLsCmd() *cobra.Command {
	var (
		project string
		limit   int
	)
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List sweeps and job arrays, newest first",
		Args:    exactArgs(0),
	}
	cmd.Flags().StringVar(&project, "project", "", "only sweeps of this project")
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many (default 50)")
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := a.clientChecked(checkOutput)
		if err != nil {
			return err
		}
		list, err := c.ListSweeps(cmd.Context(), project, limit)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if ok, err := writeStructured(out, *output, list); ok {
			return err
		}
		if len(list.Sweeps) == 0 {
			fmt.Fprintln(cmd.ErrOrStderr(), "no sweeps found; submit one with: trainyard submit SPEC --array 0-9")
			return nil
		}
		now := a.env.now()
		tw := newTable(out)
		fmt.Fprintln(tw, "ID\tNAME\tPROJECT\tMETHOD\tMEMBERS\tMAX PARALLEL\tSUBMITTER\tAGE")
		for _, sw := range list.Sweeps {
			maxPar := "-"
			if sw.MaxParallel > 0 {
				maxPar = strconv.Itoa(sw.MaxParallel)
			}
			method := sw.Method
			if sw.CanceledAt != nil {
				method += " (canceled)"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", sw.ID, cell(sw.Name), cell(sw.Project), method, sw.Members,
				maxPar, cell(sw.Submitter), age(now, sw.CreatedAt))
		}
		return tw.Flush()
	}
	return cmd
}

func (a *app) sweepShowCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show a sweep: its members by state and its best member",
		Long: `Show a sweep or job array: its definition, its members counted by state,
and, when it has an objective, its best member so far (each member's best
reported value of the objective's metric).`,
		Example: `  trainyard sweep show 4
  trainyard ls --sweep 4`,
		Args: exactArgs(1),
	}
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id, err := parseSweepID(args[0])
		if err != nil {
			return err
		}
		c, err := a.clientChecked(checkOutput)
		if err != nil {
			return err
		}
		sw, err := c.GetSweep(cmd.Context(), id)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if ok, err := writeStructured(out, *output, sw); ok {
			return err
		}
		return writeSweep(out, sw)
	}
	return cmd
}

func (a *app) sweepCancelCmd() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel every member of a sweep that has not ended",
		Args:  exactArgs(1),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the members' history and the audit log")
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id, err := parseSweepID(args[0])
		if err != nil {
			return err
		}
		c, err := a.clientChecked(checkOutput)
		if err != nil {
			return err
		}
		sw, err := c.CancelSweep(cmd.Context(), id, reason)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if ok, err := writeStructured(out, *output, sw); ok {
			return err
		}
		fmt.Fprintf(out, "sweep %d canceled: %s\n", sw.ID, countsLine(sw.Counts))
		return nil
	}
	return cmd
}

func parseSweepID(s string) (int64, error) {
	id, err := strconv.ParseInt(strings.TrimPrefix(s, "sweep/"), 10, 64)
	if err != nil || id <= 0 {
		return 0, usageErrorf("invalid sweep id %q: want a positive integer such as 4 (see: trainyard sweep ls)", s)
	}
	return id, nil
}

// countsLine writes members by state in lifecycle order: "3 running, 9 held".
func countsLine(counts map[string]int) string {
	var parts []string
	for _, st := range domain.JobStates() {
		if n := counts[string(st)]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, st))
		}
	}
	if len(parts) == 0 {
		return "no members"
	}
	return strings.Join(parts, ", ")
}

func writeSweep(w io.Writer, sw apitypes.Sweep) error {
	tw := newTable(w)
	fmt.Fprintf(tw, "Sweep:\t%d (%s)\n", sw.ID, cell(sw.Name))
	fmt.Fprintf(tw, "Project:\t%s\n", cell(sw.Project))
	fmt.Fprintf(tw, "Submitter:\t%s\n", cell(sw.Submitter))
	fmt.Fprintf(tw, "Method:\t%s\n", sw.Method)
	maxPar := "no limit"
	if sw.MaxParallel > 0 {
		maxPar = strconv.Itoa(sw.MaxParallel) + " at once"
	}
	fmt.Fprintf(tw, "Members:\t%d (%s)\n", sw.Members, maxPar)
	fmt.Fprintf(tw, "State:\t%s: %s\n", sw.State, countsLine(sw.Counts))
	if sw.CanceledAt != nil {
		fmt.Fprintf(tw, "Canceled:\tby %s at %s\n", cell(sw.CanceledBy), sw.CanceledAt.Local().Format("2006-01-02 15:04:05"))
	}
	if o := sw.Objective; o != nil {
		fmt.Fprintf(tw, "Objective:\t%s %s\n", o.Goal, cell(o.Metric))
		if b := sw.Best; b != nil {
			params := make([]string, 0, len(b.Params))
			for _, k := range slices.Sorted(maps.Keys(b.Params)) {
				params = append(params, k+"="+b.Params[k])
			}
			fmt.Fprintf(tw, "Best:\tjob %d (index %d): %s = %s at step %d; %s\n", b.Job, b.Index, cell(b.Metric),
				strconv.FormatFloat(b.Value, 'g', 6, 64), b.Step, cell(strings.Join(params, " ")))
		} else {
			fmt.Fprintf(tw, "Best:\tnone yet: no member has reported %s\n", cell(o.Metric))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "members: trainyard ls --sweep %d\n", sw.ID)
	return err
}

// submitSweep submits req as a sweep or job array.
func (a *app) submitSweep(cmd *cobra.Command, c *client.Client, req apitypes.SubmitRequest, array, contextDir, key string, wait bool, output string) error {
	ctx := cmd.Context()
	code, err := a.uploadContext(ctx, c, cmd.ErrOrStderr(), contextDir, req) // --context: code.go
	if err != nil {
		return err
	}
	sw, err := c.SubmitSweep(ctx, apitypes.SweepRequest{Spec: req.Spec, Set: req.Set, Array: array, Code: code}, key)
	if err != nil {
		return err
	}
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	if !structured(output) {
		fmt.Fprintln(stdout, sw.ID)
	} else if !wait {
		_, err := writeStructured(stdout, output, sw)
		return err
	}
	if a.env.isTerminal(stderr) {
		at := "all at once"
		if sw.MaxParallel > 0 {
			at = fmt.Sprintf("%d at a time", sw.MaxParallel)
		}
		verb := "submitted sweep"
		if sw.Created != nil && !*sw.Created {
			verb = "idempotency key matched existing sweep"
		}
		fmt.Fprintf(stderr, "%s %d (%s): %s, %s — see: trainyard sweep show %d\n", verb, sw.ID, oneLine(sw.Name),
			countOf(sw.Members, "job"), at, sw.ID)
	}
	if !wait {
		return nil
	}
	for {
		sw, err = c.GetSweep(ctx, sw.ID)
		if err != nil {
			return fmt.Errorf("waiting for sweep %d: %w", sw.ID, err)
		}
		if domain.JobState(sw.State).Terminal() {
			break
		}
		if err := a.sleep(ctx); err != nil {
			return err
		}
	}
	if _, err := writeStructured(stdout, output, sw); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "sweep %d %s: %s\n", sw.ID, sw.State, countsLine(sw.Counts))
	if sw.State != string(domain.JobSucceeded) {
		return &exitError{code: ExitFailure}
	}
	return nil
}

// hasTopKey reports whether the YAML or JSON document has key at its top
// level; a document that does not parse has none (the server reports its
// errors with line numbers).
func hasTopKey(doc []byte, key string) bool {
	var top map[string]any
	if err := yaml.Unmarshal(doc, &top); err != nil {
		return false
	}
	_, ok := top[key]
	return ok
}
