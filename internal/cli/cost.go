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

// costGroupings are the --by values the server accepts.
var costGroupings = []string{"project", "pool", "user", "job", "day"}

func (a *app) costCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cost",
		Short: "Show what attempts cost, by project, pool, user, job or day",
		Long: `Show spend over a window: every attempt's allocation (GPUs, CPUs and memory,
times its nodes) at its pool's rates, for the time it ran inside the window;
running attempts count up to now. Preempted, failed, timed-out and lost
attempts count too, and their spend is shown again as WASTE. RUNNING/H is
what the group's running attempts cost per hour now. Below, what the
groups' stored outputs and checkpoints cost, per tier, over the whole UTC
days of the window that are over: each day a job kept bytes on local disk
or in the object store, at its pool's local_gib_month or object_gib_month
(a month is 30 days).

Without --project the report covers every project you hold a role in
(admins, resource-admins and auditors: all). --since takes a duration back
from now (30d, 12h) or a time (2026-03-01, RFC 3339); --by day groups by
UTC day. -o json prints the API's exact amounts; -o csv one row per group
and a total row, for spreadsheets. See docs/cost.md.`,
		Example: `  trainyard cost
  trainyard cost --project vision --since 7d --by user
  trainyard cost --by day -o csv > spend.csv`,
		Args: exactArgs(0),
	}
	var opts client.CostOptions
	checkWindow := windowFlags(cmd, &opts, "30d", costGroupings)
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
		rep, err := c.Cost(cmd.Context(), opts)
		if err != nil {
			return err
		}
		if rep.Lines == nil {
			rep.Lines = []apitypes.CostLine{}
		}
		out := cmd.OutOrStdout()
		if *output == formatCSV {
			return writeCostCSV(out, rep)
		}
		if ok, err := writeStructured(out, *output, rep); ok {
			return err
		}
		if len(rep.Lines) == 0 {
			fmt.Fprintf(cmd.ErrOrStderr(), "no attempts ran since %s\n", rep.Since.UTC().Format("2006-01-02 15:04 MST"))
		} else if err := writeCostTable(out, rep); err != nil {
			return err
		}
		return writeStorageTable(out, rep)
	}
	return cmd
}

// windowFlags adds a report's --project, --since (default since) and --by
// (one of groupings) to cmd, and returns the check of --by.
func windowFlags(cmd *cobra.Command, opts *client.CostOptions, since string, groupings []string) func() error {
	cmd.Flags().StringVar(&opts.Project, "project", "", "only this project (default: every project you hold a role in)")
	cmd.Flags().StringVar(&opts.Since, "since", since, "start of the window: a duration back from now ("+since+", 12h) or a time (2026-03-01)")
	cmd.Flags().StringVar(&opts.By, "by", "project", "group by "+strings.Join(groupings, "|"))
	_ = cmd.RegisterFlagCompletionFunc("by", completeFrom(groupings))
	return func() error {
		if !slices.Contains(groupings, opts.By) {
			return usageErrorf("invalid --by %q: want one of %s", opts.By, strings.Join(groupings, ", "))
		}
		return nil
	}
}

// cents shows an exact amount from the server to the cent, half away from
// zero; what does not parse is shown as it is.
func cents(s string) string {
	m, err := domain.ParseMoney(s)
	if err != nil {
		return s
	}
	return m.Cents()
}

func hours(h float64) string { return strconv.FormatFloat(h, 'f', 1, 64) }

func writeCostTable(w io.Writer, rep apitypes.CostReport) error {
	unit := ""
	if rep.Currency != "" {
		unit = " (" + rep.Currency + ")"
	}
	tw := newTable(w)
	fmt.Fprintf(tw, "%s\tGPU-H\tCPU-H\tCOST%s\tWASTE\tRUNNING/H\tATTEMPTS\n", strings.ToUpper(rep.By), unit)
	total := rep.Total
	total.Group = "TOTAL"
	for _, l := range append(rep.Lines, total) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\n", cell(l.Group), hours(l.GPUHours), hours(l.CPUHours),
			cents(l.Cost), cents(l.Waste), cents(l.RunningPerHour), l.Attempts)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "since %s, until %s\n", rep.Since.UTC().Format("2006-01-02 15:04 MST"), rep.Until.UTC().Format("2006-01-02 15:04 MST"))
	return err
}

// writeStorageTable writes the storage lines, when there are any, after
// the compute table.
func writeStorageTable(w io.Writer, rep apitypes.CostReport) error {
	st := rep.Storage
	if len(st.Lines) == 0 {
		return nil
	}
	unit := ""
	if rep.Currency != "" {
		unit = " (" + rep.Currency + ")"
	}
	fmt.Fprintln(w)
	tw := newTable(w)
	fmt.Fprintf(tw, "%s\tLOCAL GiB-DAYS\tOBJECT GiB-DAYS\tLOCAL COST\tOBJECT COST\tSTORAGE COST%s\n", strings.ToUpper(rep.By), unit)
	total := st.Total
	total.Group = "TOTAL"
	for _, l := range append(st.Lines, total) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", cell(l.Group), gibDays(l.LocalGiBDays), gibDays(l.ObjectGiBDays),
			cents(l.LocalCost), cents(l.ObjectCost), cents(l.Cost))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "storage: whole UTC days %s to %s (a month is 30 days)\n", st.Since.UTC().Format(time.DateOnly), st.Until.UTC().Add(-time.Nanosecond).Format(time.DateOnly))
	return err
}

func gibDays(d float64) string { return strconv.FormatFloat(d, 'f', 2, 64) }

// writeCostCSV writes one row per group and a total row, amounts exact
// as the server sent them: compute, then the group's storage over the
// window's whole days.
func writeCostCSV(w io.Writer, rep apitypes.CostReport) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{rep.By, "gpu_hours", "cpu_hours", "cost", "waste", "running_per_hour", "attempts",
		"local_gib_days", "object_gib_days", "storage_cost", "currency"})
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	stored := map[string]apitypes.StorageLine{}
	for _, sl := range rep.Storage.Lines {
		stored[sl.Group] = sl
	}
	row := func(l apitypes.CostLine, sl apitypes.StorageLine) {
		if sl.Cost == "" {
			sl.Cost = "0"
		}
		_ = cw.Write([]string{l.Group, f(l.GPUHours), f(l.CPUHours), l.Cost, l.Waste, l.RunningPerHour, strconv.Itoa(l.Attempts),
			f(sl.LocalGiBDays), f(sl.ObjectGiBDays), sl.Cost, rep.Currency})
	}
	for _, l := range rep.Lines {
		row(l, stored[l.Group])
		delete(stored, l.Group)
	}
	// Groups that only stored: no compute in the window.
	for _, sl := range rep.Storage.Lines {
		if _, only := stored[sl.Group]; only {
			row(apitypes.CostLine{Group: sl.Group, Cost: "0", Waste: "0", RunningPerHour: "0"}, sl)
		}
	}
	row(rep.Total, rep.Storage.Total)
	cw.Flush()
	return cw.Error()
}
