package cli

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
)

// budgetActions are the --action values the server accepts.
func budgetActions() []string {
	var out []string
	for _, a := range domain.BudgetActions() {
		out = append(out, string(a))
	}
	return out
}

func (a *app) budgetCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "budget",
		Short: "List, set and remove project budgets: money limits per month or period",
		Long: `A budget limits what one project spends, in the server's currency, every
calendar month (UTC) or once from a start to an end. Its action says what
happens at the limit: notify limits nothing (budget ls shows the spend);
block holds the project's jobs whose worst-case cost (their timeout at their
pool's rates) would take its committed spend past the budget, with reason
BudgetExceeded, until the budget is raised or removed or the period rolls;
suspend also stops the project's running preemptible jobs once spend reaches
the budget, as preemptions: they checkpoint and requeue, then wait held.
See docs/cost.md#budgets.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.budgetLsCmd(), a.budgetSetCmd(), a.budgetRmCmd())
	return cmd
}

func (a *app) budgetLsCmd() *cobra.Command {
	var project string
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List budgets with their spend this period",
		Long: `List budgets by project: PROJECT, PERIOD (the one that holds now: 2026-12 for
a month, 2026-12-01..2027-01-01 for a one-off period), AMOUNT, SPENT (what the
project's attempts cost in the period so far), COMMITTED (spent plus what its
running jobs may still cost until their timeouts; "unbounded" when one has no
timeout), USED% (spent of the amount), ACTION and THRESHOLDS (percentages).
A one-off budget whose period has not begun or has ended shows "not in force".
Amounts are rounded to the cent; -o json gives them exactly.`,
		Example: `  trainyard budget ls
  trainyard budget ls --project vision -o json`,
		Args: exactArgs(0),
	}
	cmd.Flags().StringVar(&project, "project", "", "only this project's budget")
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := a.clientChecked(checkOutput)
		if err != nil {
			return err
		}
		budgets, err := c.ListBudgets(cmd.Context(), project)
		if err != nil {
			return err
		}
		if budgets == nil {
			budgets = []apitypes.Budget{}
		}
		out := cmd.OutOrStdout()
		if ok, err := writeStructured(out, *output, apitypes.BudgetList{Budgets: budgets}); ok {
			return err
		}
		if len(budgets) == 0 {
			fmt.Fprintln(cmd.ErrOrStderr(), "no budgets found; set one with: trainyard budget set PROJECT --amount 5000")
			return nil
		}
		return writeBudgetTable(out, budgets)
	}
	return cmd
}

func writeBudgetTable(w io.Writer, budgets []apitypes.Budget) error {
	unit := ""
	if c := budgets[0].Currency; c != "" {
		unit = " (" + c + ")"
	}
	tw := newTable(w)
	fmt.Fprintf(tw, "PROJECT\tPERIOD\tAMOUNT%s\tSPENT\tCOMMITTED\tUSED%%\tRATE/H\tACTION\tTHRESHOLDS\n", unit)
	for _, b := range budgets {
		spent, committed, used, rate := "-", "-", "-", "-"
		if b.InForce {
			spent, committed, used = cents(string(b.Spent)), cents(string(b.Committed)), strconv.FormatFloat(b.PercentUsed, 'f', 1, 64)+"%"
			if b.CommittedUnbounded {
				committed = "unbounded"
			}
			if b.RatePerHour != "" {
				rate = cents(string(b.RatePerHour))
			}
		}
		if b.MaxRatePerHour != "" {
			rate += " of " + cents(string(b.MaxRatePerHour))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(b.Project), cell(budgetPeriod(b)), cents(string(b.Amount)),
			spent, committed, used, rate, cell(b.Action), thresholdsText(b.Thresholds))
	}
	return tw.Flush()
}

// budgetPeriod names the period that holds now, or the one-off period
// with "(not in force)".
func budgetPeriod(b apitypes.Budget) string {
	if b.InForce {
		return b.PeriodName
	}
	if b.Period == domain.BudgetMonthly {
		return "month (not in force)"
	}
	return budgetDate(b.Start) + ".." + budgetDate(b.End) + " (not in force)"
}

// budgetDate shows an RFC 3339 time from the server as a date when it is
// midnight UTC, else as it is.
func budgetDate(s string) string {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return s
	}
	if t = t.UTC(); t.Equal(t.Truncate(24 * time.Hour)) {
		return t.Format(time.DateOnly)
	}
	return t.Format(time.RFC3339)
}

func thresholdsText(ts []int) string {
	if len(ts) == 0 {
		return "-"
	}
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = strconv.Itoa(t)
	}
	return strings.Join(parts, ",")
}

func (a *app) budgetSetCmd() *cobra.Command {
	var amount, period, start, end, thresholds, action, maxRate string
	cmd := &cobra.Command{
		Use:   "set PROJECT",
		Short: "Create or change a project's budget",
		Long: `Create or change the budget of PROJECT. A new budget needs --amount; its
period is every calendar month (UTC) unless --start and --end give one period,
its thresholds are 50,80,100 (percent of the amount) and its action is notify.
On an existing budget only the flags given change. --start and --end take dates
(2026-12-01, midnight UTC) or RFC 3339 times; the period ends before --end.
Jobs held for the budget are looked at again at the next scheduling pass.`,
		Example: `  trainyard budget set vision --amount 5000
  trainyard budget set vision --amount 5000 --action block --thresholds 80,100
  trainyard budget set nlp --amount 1200.50 --start 2026-12-01 --end 2027-01-01 --action suspend`,
		Args: exactArgs(1),
	}
	fl := cmd.Flags()
	fl.StringVar(&amount, "amount", "", "the budget per period in the server's currency, e.g. 5000 or 1250.50")
	fl.StringVar(&period, "period", "", "month: renew every calendar month (the default for a new budget); or give --start and --end")
	fl.StringVar(&start, "start", "", "start of one period: a date (2026-12-01) or an RFC 3339 time")
	fl.StringVar(&end, "end", "", "end of that period, exclusive: a date (2027-01-01) or an RFC 3339 time")
	fl.StringVar(&thresholds, "thresholds", "", `percentages of the amount, rising, such as 80,100, or "none" (a new budget: 50,80,100)`)
	fl.StringVar(&action, "action", "", "at the budget: notify, block or suspend (default notify for a new budget)")
	fl.StringVar(&maxRate, "max-rate", "", "a spend-rate limit: what the project's running jobs may cost per hour together, e.g. 50; 0 for none")
	_ = cmd.RegisterFlagCompletionFunc("action", completeFrom(budgetActions()))
	_ = cmd.RegisterFlagCompletionFunc("period", completeFrom([]string{domain.BudgetMonthly}))
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(); err != nil {
			return err
		}
		set := cmd.Flags().Changed
		if set("period") && (set("start") || set("end")) {
			return usageErrorf("give --period month, or --start and --end for one period, not both")
		}
		if set("period") && period != domain.BudgetMonthly {
			return usageErrorf("invalid --period %q: the only period is month; for one period give --start and --end instead", period)
		}
		if set("amount") {
			m, err := domain.ParseMoney(amount)
			if err == nil && m <= 0 {
				err = fmt.Errorf("a budget must be more than 0")
			}
			if err != nil {
				return usageErrorf("invalid --amount: %v; give an amount such as --amount 5000", err)
			}
			amount = m.String()
		}
		if set("max-rate") {
			m, err := domain.ParseMoney(maxRate)
			if err == nil && m < 0 {
				err = fmt.Errorf("a limit cannot be negative")
			}
			if err != nil {
				return usageErrorf("invalid --max-rate: %v; give an amount per hour such as --max-rate 50, or 0 for none", err)
			}
			maxRate = m.String()
		}
		for name, v := range map[string]*string{"start": &start, "end": &end} {
			if set(name) {
				t, err := parseBudgetFlagTime(*v)
				if err != nil {
					return usageErrorf("invalid --%s %q: give a date such as 2026-12-01 or an RFC 3339 time", name, *v)
				}
				*v = t
			}
		}
		var ts []int
		if set("thresholds") {
			var err error
			if ts, err = parseThresholds(thresholds); err != nil {
				return usageErrorf("invalid --thresholds %q: %v", thresholds, err)
			}
		}
		if set("action") && !slices.Contains(budgetActions(), action) {
			return usageErrorf("invalid --action %q: want one of %s", action, strings.Join(budgetActions(), ", "))
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		project := args[0]
		existing, err := c.ListBudgets(cmd.Context(), project)
		if err != nil {
			return err
		}
		var b apitypes.Budget
		found := false
		for _, e := range existing {
			if e.Project == project {
				b, found = budgetRequest(e), true
			}
		}
		if !found {
			if !set("amount") {
				return usageErrorf("project %s has no budget yet; give --amount, such as --amount 5000", project)
			}
			b = apitypes.Budget{Project: project}
			if !set("start") && !set("end") {
				b.Period = domain.BudgetMonthly
			}
		}
		if set("amount") {
			b.Amount = apitypes.Amount(amount)
		}
		if set("period") {
			b.Period, b.Start, b.End = period, "", ""
		}
		if set("start") || set("end") {
			if b.Period == domain.BudgetMonthly && !(set("start") && set("end")) {
				return usageErrorf("project %s has a monthly budget; to give it one period instead, give both --start and --end", project)
			}
			b.Period = ""
			if set("start") {
				b.Start = start
			}
			if set("end") {
				b.End = end
			}
		}
		if set("thresholds") {
			b.Thresholds = ts
		}
		if set("action") {
			b.Action = action
		}
		if set("max-rate") {
			b.MaxRatePerHour = apitypes.Amount(maxRate)
		}
		stored, err := c.PutBudget(cmd.Context(), b)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if ok, err := writeStructured(out, *output, stored); ok {
			return err
		}
		return writeBudgetSet(out, stored)
	}
	return cmd
}

// budgetRequest is the PUT body that keeps e as it is.
func budgetRequest(e apitypes.Budget) apitypes.Budget {
	ts := e.Thresholds
	if ts == nil {
		ts = []int{}
	}
	return apitypes.Budget{Project: e.Project, Amount: e.Amount, Period: e.Period, Start: e.Start, End: e.End,
		Thresholds: ts, Action: e.Action, MaxRatePerHour: e.MaxRatePerHour}
}

func writeBudgetSet(w io.Writer, b apitypes.Budget) error {
	when := "per month"
	if b.Period != domain.BudgetMonthly {
		when = "from " + budgetDate(b.Start) + " to " + budgetDate(b.End)
	}
	ts := thresholdsText(b.Thresholds)
	if ts == "-" {
		ts = "none"
	} else {
		ts += "%"
	}
	if _, err := fmt.Fprintln(w, oneLine(fmt.Sprintf("set the budget of project %s: %s %s %s, action %s, thresholds %s",
		b.Project, cents(string(b.Amount)), b.Currency, when, b.Action, ts))); err != nil {
		return err
	}
	var line string
	switch {
	case !b.InForce:
		line = "not in force now: its period has not begun or has ended"
	case b.CommittedUnbounded:
		line = fmt.Sprintf("%s: spent %s (%.1f%%), committed unbounded (a running job has no timeout)", b.PeriodName, cents(string(b.Spent)), b.PercentUsed)
	default:
		line = fmt.Sprintf("%s: spent %s (%.1f%%), committed %s", b.PeriodName, cents(string(b.Spent)), b.PercentUsed, cents(string(b.Committed)))
	}
	_, err := fmt.Fprintln(w, oneLine(line))
	return err
}

// parseBudgetFlagTime reads a date (midnight UTC) or an RFC 3339 time and
// writes it as RFC 3339.
func parseBudgetFlagTime(s string) (string, error) {
	for _, layout := range []string{time.RFC3339Nano, time.DateOnly} {
		if t, err := time.Parse(layout, strings.TrimSpace(s)); err == nil {
			return t.UTC().Format(time.RFC3339Nano), nil
		}
	}
	return "", fmt.Errorf("not a date or time")
}

// parseThresholds reads "50,80,100"; "none" and "" are no thresholds.
func parseThresholds(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "none" {
		return []int{}, nil
	}
	var out []int
	for _, part := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(part), "%")))
		if err != nil || n < 1 || n > 1000 {
			return nil, fmt.Errorf("%q is not a percentage from 1 to 1000; give rising percentages such as 50,80,100, or none", part)
		}
		if len(out) > 0 && n <= out[len(out)-1] {
			return nil, fmt.Errorf("thresholds must rise: %d follows %d", n, out[len(out)-1])
		}
		out = append(out, n)
	}
	return out, nil
}

func (a *app) budgetRmCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "rm PROJECT",
		Aliases: []string{"remove", "delete"},
		Short:   "Remove a project's budget",
		Long: `Remove the budget of PROJECT. Its spend is no longer limited; jobs the budget
held go back to the queue at the next scheduling pass.`,
		Example: `  trainyard budget rm vision`,
		Args:    exactArgs(1),
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := a.client()
		if err != nil {
			return err
		}
		if err := c.DeleteBudget(cmd.Context(), args[0]); err != nil {
			return err
		}
		_, err = fmt.Fprintf(cmd.OutOrStdout(), "removed the budget of project %s\n", oneLine(args[0]))
		return err
	}
	return cmd
}
