package cli

import (
	"encoding/csv"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/client"
	"trainyard/internal/domain"
)

// reportGroupings are the --by values the server accepts.
var reportGroupings = []string{"project", "pool"}

func (a *app) reportCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "report",
		Short: "Review a window: queue times, failures, utilisation, waste and spend",
		Long: `Review what happened over a window, by project or pool:

  ACTIVITY   jobs submitted; queue time (submission to first start) at the
             50th, 90th and 99th percentile of the jobs that first started
             in the window; attempts started, retried, ended, failed (failed,
             timed out or lost, with FAIL% of those that ended) and preempted.
  RESOURCES  GPU- and CPU-hours held, the share of each that was used (GPU
             time weighted by the sampler's utilisation readings), and by
             pool the share of the pool's capacity held; cost,
             WASTE (spent on preempted, failed, timed-out and lost attempts),
             STORAGE (stored outputs and checkpoints, over the window's
             whole days) and, by project, the budget's current period.
  FAILURES   the attempts that did not succeed, by state and reason.
  RIGHT-SIZING  jobs that used under a quarter of the CPUs they held, with
             what the idle CPUs cost, and jobs that peaked at 90% or more of
             their memory limit.

Without --project the report covers every project you hold a role in
(admins, resource-admins and auditors: all). --since takes a duration back
from now (7d, 12h) or a time (2026-03-01, RFC 3339). -o json prints the
API's body; -o csv one row per group and a total row. See docs/cost.md.`,
		Example: `  trainyard report
  trainyard report --since 30d --by pool
  trainyard report --project vision -o csv > week.csv`,
		Args: exactArgs(0),
	}
	var opts client.ReportOptions
	checkWindow := windowFlags(cmd, &opts, "7d", reportGroupings)
	output, checkOutput := outputFlag(cmd, formatCSV)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(); err != nil {
			return err
		}
		if err := checkWindow(); err != nil {
			return err
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		rep, err := c.Report(cmd.Context(), opts)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if *output == formatCSV {
			return writeReportCSV(out, rep)
		}
		if ok, err := writeStructured(out, *output, rep); ok {
			return err
		}
		if len(rep.Lines) == 0 {
			fmt.Fprintf(cmd.ErrOrStderr(), "nothing was submitted or ran since %s\n", rep.Since.UTC().Format("2006-01-02 15:04 MST"))
			return nil
		}
		return writeReport(out, rep)
	}
	return cmd
}

// secs renders seconds from the server as a duration; "-" without data.
func secs(s float64, n int) string {
	if n == 0 {
		return "-"
	}
	return duration(time.Duration(s * float64(time.Second)))
}

// pct renders part/whole as a whole percentage; "-" when whole is 0.
func pct(part, whole float64) string {
	if whole <= 0 {
		return "-"
	}
	return strconv.FormatFloat(100*part/whole, 'f', 0, 64) + "%"
}

func writeReport(w io.Writer, rep apitypes.Report) error {
	group := strings.ToUpper(rep.By)
	total := rep.Total
	total.Group = "TOTAL"
	lines := append(slices.Clone(rep.Lines), total)
	fmt.Fprintf(w, "Review %s – %s\n\n", rep.Since.UTC().Format("2006-01-02 15:04"), rep.Until.UTC().Format("2006-01-02 15:04 MST"))

	tw := newTable(w)
	fmt.Fprintf(tw, "%s\tSUBMITTED\tQUEUE P50\tP90\tP99\tSTARTED\tRETRIES\tENDED\tFAILED\tFAIL%%\tPREEMPTED\n", group)
	for _, l := range lines {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%d\n", cell(l.Group), l.Submitted,
			secs(l.Queue.P50, l.Queue.N), secs(l.Queue.P90, l.Queue.N), secs(l.Queue.P99, l.Queue.N),
			l.Started, l.Retries, l.Ended, l.Failed, pct(float64(l.Failed), float64(l.Ended)), l.Preempted)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	unit := ""
	if rep.Currency != "" {
		unit = " (" + rep.Currency + ")"
	}
	fmt.Fprintln(w)
	tw = newTable(w)
	capacity := rep.By == "pool"
	head := group + "\tGPU-H\tGPU USED\tCPU-H\tCPU USED"
	if capacity {
		head += "\tGPU OF POOL\tCPU OF POOL"
	}
	head += "\tCOST" + unit + "\tWASTE\tSTORAGE"
	if !capacity {
		head += "\tBUDGET"
	}
	fmt.Fprintln(tw, head)
	for _, l := range lines {
		row := fmt.Sprintf("%s\t%s\t%s\t%s\t%s", cell(l.Group), hours(l.GPUHours), pct(l.GPUHoursUsed, l.GPUHours),
			hours(l.CPUHours), pct(l.CPUHoursUsed, l.CPUHours))
		if capacity {
			row += "\t" + pct(l.GPUHours, l.CapacityGPUHours) + "\t" + pct(l.CPUHours, l.CapacityCPUHours)
		}
		row += "\t" + cents(l.Cost) + "\t" + cents(l.Waste) + "\t" + cents(l.Storage)
		if !capacity {
			row += "\t" + reportBudget(l.Budget)
		}
		fmt.Fprintln(tw, row)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	if len(rep.Total.Failures) > 0 {
		fmt.Fprintln(w, "\nAttempts that did not succeed, by reason:")
		tw = newTable(w)
		fmt.Fprintf(tw, "  %s\tSTATE\tREASON\tATTEMPTS\n", group)
		for _, l := range rep.Lines {
			for _, f := range l.Failures {
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\n", cell(l.Group), f.State, cell(f.Reason), f.N)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(rep.Oversized) > 0 {
		fmt.Fprintf(w, "\nJobs that used under %s of the CPUs they held:\n", pct(rep.Under, 1))
		tw = newTable(w)
		fmt.Fprintln(tw, "  JOB\tNAME\tPROJECT\tUSER\tCPUS\tUSED\tHELD\tIDLE COST")
		for _, j := range rep.Oversized {
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%g\t%.2f\t%s\t%s\n", j.ID, cell(j.Name), cell(j.Project), cell(j.User),
				j.CPUs, j.UsedCPUs, duration(time.Duration(j.HeldHours*float64(time.Hour))), cents(j.IdleCost))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(rep.NearMemory) > 0 {
		fmt.Fprintf(w, "\nJobs that peaked at %s or more of their memory limit:\n", pct(rep.Near, 1))
		tw = newTable(w)
		fmt.Fprintln(tw, "  JOB\tNAME\tPROJECT\tUSER\tMEMORY\tPEAK")
		for _, j := range rep.NearMemory {
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\n", j.ID, cell(j.Name), cell(j.Project), cell(j.User),
				domain.ByteSize(j.Memory), domain.ByteSize(j.MaxRSS))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// reportBudget shows a budget's use: "412.50/1000.00 (2026-12)".
func reportBudget(b *apitypes.ReportBudget) string {
	if b == nil {
		return "-"
	}
	return cents(b.Spent) + "/" + cents(b.Amount) + " (" + b.Period + ")"
}

// writeReportCSV writes one row per group and a total row, amounts exact
// as the server sent them, durations in seconds.
func writeReportCSV(w io.Writer, rep apitypes.Report) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{rep.By, "submitted", "queue_n", "queue_p50_seconds", "queue_p90_seconds", "queue_p99_seconds",
		"queue_max_seconds", "started", "retries", "ended", "succeeded", "failed", "failure_rate", "preempted",
		"gpu_hours", "gpu_hours_used", "cpu_hours", "cpu_hours_used", "capacity_gpu_hours", "capacity_cpu_hours", "cost", "waste", "storage",
		"budget_amount", "budget_spent", "currency"})
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	for _, l := range append(slices.Clone(rep.Lines), rep.Total) {
		amount, spent := "", ""
		if l.Budget != nil {
			amount, spent = l.Budget.Amount, l.Budget.Spent
		}
		_ = cw.Write([]string{l.Group, strconv.Itoa(l.Submitted), strconv.Itoa(l.Queue.N), f(l.Queue.P50), f(l.Queue.P90),
			f(l.Queue.P99), f(l.Queue.Max), strconv.Itoa(l.Started), strconv.Itoa(l.Retries), strconv.Itoa(l.Ended),
			strconv.Itoa(l.Succeeded), strconv.Itoa(l.Failed), f(l.FailureRate), strconv.Itoa(l.Preempted),
			f(l.GPUHours), f(l.GPUHoursUsed), f(l.CPUHours), f(l.CPUHoursUsed), f(l.CapacityGPUHours), f(l.CapacityCPUHours),
			l.Cost, l.Waste, l.Storage, amount, spent, rep.Currency})
	}
	cw.Flush()
	return cw.Error()
}
