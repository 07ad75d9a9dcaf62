package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
)

// parseUntil reads an absolute date (2026-12-31, RFC 3339) or a duration
// from now (14d, 36h).
func parseUntil(s string, now time.Time) (time.Time, error) {
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	if d, err := domain.ParseDuration(s); err == nil && d > 0 {
		return now.Add(d), nil
	}
	return time.Time{}, usageErrorf("--until %q is neither a date (2026-12-31, 2026-12-31T18:00, RFC 3339) nor a duration from now (14d, 36h)", s)
}

func (a *app) quotaRequestCmd() *cobra.Command {
	var (
		project, pool, memory, until, reason string
		gpus, jobs                           int
		cpus                                 float64
	)
	cmd := &cobra.Command{
		Use:   "request --project P --pool X --until DATE --reason TEXT [--gpus N] [--cpus N] [--memory M] [--jobs N]",
		Short: "Ask for more capacity in a pool for a while",
		Long: `File a compute request: more GPUs, CPUs, memory or concurrent jobs for a
project in a pool, until a date, with a reason. A resource admin (or an
admin) other than you approves or denies it; once approved it raises the
project's quota at once and returns it to normal by itself at the date.`,
		Example: `  trainyard quota request --project vision --pool standard --gpus 16 --until 14d --reason "ICLR rebuttal runs"
  trainyard quota request --project nlp --pool priority --gpus 2 --until 2026-12-31 --reason "eval sweep"`,
		Args: exactArgs(0),
	}
	fl := cmd.Flags()
	fl.StringVar(&project, "project", "", "the project that needs the capacity (required)")
	fl.StringVar(&pool, "pool", "", "the pool (required)")
	fl.IntVar(&gpus, "gpus", 0, "extra GPUs")
	fl.Float64Var(&cpus, "cpus", 0, "extra CPUs")
	fl.StringVar(&memory, "memory", "", "extra memory, e.g. 256GiB")
	fl.IntVar(&jobs, "jobs", 0, "extra concurrent jobs")
	fl.StringVar(&until, "until", "", "until when: a date (2026-12-31) or a duration from now (14d) (required)")
	fl.StringVar(&reason, "reason", "", "what the capacity is for (required)")
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(); err != nil {
			return err
		}
		for name, v := range map[string]string{"project": project, "pool": pool, "until": until, "reason": reason} {
			if v == "" {
				return usageErrorf("--%s is required; see 'trainyard quota request --help'", name)
			}
		}
		t, err := parseUntil(until, a.env.now())
		if err != nil {
			return err
		}
		if memory != "" {
			b, err := domain.ParseByteSize(memory)
			if err != nil {
				return usageErrorf("invalid --memory: %v", err)
			}
			memory = b.String()
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		out, err := c.RequestQuota(cmd.Context(), apitypes.QuotaRequest{Project: project, Pool: pool, GPUs: gpus, CPUs: cpus,
			Memory: memory, Jobs: jobs, Until: t, Reason: reason})
		if err != nil {
			return err
		}
		if ok, err := writeStructured(cmd.OutOrStdout(), *output, out); ok {
			return err
		}
		fmt.Fprintln(cmd.OutOrStdout(), out.ID)
		if a.env.isTerminal(cmd.ErrOrStderr()) {
			fmt.Fprintf(cmd.ErrOrStderr(), "filed compute request %d; a resource admin decides it: trainyard quota approve %d\n", out.ID, out.ID)
		}
		return nil
	}
	return cmd
}

func (a *app) quotaRequestsCmd() *cobra.Command {
	var project, pool string
	cmd := &cobra.Command{
		Use:     "requests [--project P] [--pool X]",
		Short:   "List compute requests and grants, newest first",
		Example: `  trainyard quota requests --project vision`,
		Args:    exactArgs(0),
	}
	cmd.Flags().StringVar(&project, "project", "", "only this project's requests")
	cmd.Flags().StringVar(&pool, "pool", "", "only requests for this pool")
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := a.clientChecked(checkOutput)
		if err != nil {
			return err
		}
		reqs, err := c.ListRequests(cmd.Context(), project, pool)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if ok, err := writeStructured(out, *output, apitypes.QuotaRequestList{Requests: reqs}); ok {
			return err
		}
		now := a.env.now()
		tw := newTable(out)
		fmt.Fprintln(tw, "ID\tPROJECT\tPOOL\tEXTRA\tUNTIL\tSTATUS\tREQUESTER\tDECIDER\tREASON")
		for _, r := range reqs {
			var extra []string
			if r.GPUs > 0 {
				extra = append(extra, fmt.Sprintf("gpu=%d", r.GPUs))
			}
			if r.CPUs > 0 {
				extra = append(extra, "cpu="+strconv.FormatFloat(r.CPUs, 'f', -1, 64))
			}
			if r.Memory != "" {
				extra = append(extra, "mem="+oneLine(r.Memory))
			}
			if r.Jobs > 0 {
				extra = append(extra, fmt.Sprintf("jobs=%d", r.Jobs))
			}
			until := timestamp(&r.Until)
			if r.Until.After(now) {
				until += " (in " + age(r.Until, now) + ")"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, cell(r.Project), cell(r.Pool), strings.Join(extra, " "), until,
				cell(r.Status), cell(r.Requester), cell(r.Decider), cell(r.Reason))
		}
		return tw.Flush()
	}
	return cmd
}

func (a *app) quotaDecideCmd(approve bool) *cobra.Command {
	var note string
	use, short, example := "approve ID [--note TEXT]", "Approve a compute request: the grant starts now", `  trainyard quota approve 7 --note "ok until the deadline"`
	if !approve {
		use, short, example = "deny ID --note TEXT", "Deny a compute request, saying why", `  trainyard quota deny 7 --note "standard is full this week; try scratch"`
	}
	cmd := &cobra.Command{Use: use, Short: short, Example: example, Args: exactArgs(1)}
	cmd.Flags().StringVar(&note, "note", "", "a note for the requester (required to deny)")
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(); err != nil {
			return err
		}
		id, err := parseID(args[0])
		if err != nil {
			return err
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		out, err := c.DecideRequest(cmd.Context(), id, approve, note)
		if err != nil {
			return err
		}
		if ok, err := writeStructured(cmd.OutOrStdout(), *output, out); ok {
			return err
		}
		if approve {
			fmt.Fprintf(cmd.OutOrStdout(), "approved compute request %d: project %s gets it in pool %s until %s\n", id, oneLine(out.Project), oneLine(out.Pool), timestamp(&out.Until))
		} else {
			fmt.Fprintf(cmd.OutOrStdout(), "denied compute request %d\n", id)
		}
		return nil
	}
	return cmd
}
