package cli

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/client"
)

func (a *app) alertsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "alerts",
		Short: "List alerts and test alert channels",
		Long: `The server raises alerts when a job waits in the queue too long, fails to
start, is interrupted (preempted, node lost), stalls or fails its health
check, leaves its GPUs idle, nears its memory limit, or cannot write its
outputs, and when a project's spend reaches a threshold of its budget.
Each alert fires once and resolves once, and both reach the
channels configured under alerts in the server config (webhooks, the
server log). See docs/observability.md.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.alertsLsCmd(), a.alertsAckCmd(), a.alertsTestCmd())
	return cmd
}

func (a *app) alertsLsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List alerts, newest first",
		Long: `List alerts as a table: ID, STATE, SEVERITY, RULE, JOB, FIRED (how long
ago) and SUMMARY. A firing alert someone acknowledged shows STATE
"acknowledged" (by whom in -o json). An alert about a project's budget
shows JOB "-". Without a role that reads every job you see the alerts
about the jobs you may read and the budgets of your projects.`,
		Example: `  trainyard alerts ls
  trainyard alerts ls --state firing
  trainyard alerts ls --job 42 -o json`,
		Args: exactArgs(0),
	}
	var opts client.AlertOptions
	cmd.Flags().StringVar(&opts.State, "state", "", "only alerts in this state: firing or resolved")
	cmd.Flags().Int64Var(&opts.JobID, "job", 0, "only alerts about this job")
	cmd.Flags().IntVar(&opts.Limit, "limit", 50, "at most this many alerts (1-1000)")
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if opts.State != "" && opts.State != "firing" && opts.State != "resolved" {
			return usageErrorf("invalid --state %q: use firing or resolved", opts.State)
		}
		if opts.Limit < 1 || opts.Limit > 1000 {
			return usageErrorf("invalid --limit %d: want 1 to 1000", opts.Limit)
		}
		c, err := a.clientChecked(checkOutput)
		if err != nil {
			return err
		}
		list, err := c.ListAlerts(cmd.Context(), opts)
		if err != nil {
			return err
		}
		if list == nil {
			list = []apitypes.Alert{}
		}
		out := cmd.OutOrStdout()
		if done, err := writeStructured(out, *output, apitypes.AlertList{Alerts: list}); done {
			return err
		}
		if len(list) == 0 {
			fmt.Fprintln(cmd.ErrOrStderr(), "no alerts match")
			return nil
		}
		now := a.env.now()
		tw := newTable(out)
		fmt.Fprintln(tw, "ID\tSTATE\tSEVERITY\tRULE\tJOB\tFIRED\tSUMMARY")
		for _, al := range list {
			job := "-"
			if al.Job > 0 {
				job = fmt.Sprint(al.Job)
			}
			state := al.State
			if al.State == "firing" && !al.AckedAt.IsZero() {
				state = "acknowledged"
			}
			if al.State == "resolved" && !al.ResolvedAt.IsZero() {
				state = "resolved " + shortAgo(now, al.ResolvedAt)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", al.ID, state, cell(al.Severity), cell(al.Rule), job, shortAgo(now, al.FiredAt), cell(al.Summary))
		}
		return tw.Flush()
	}
	return cmd
}

// shortAgo is how long before now t was, e.g. "5m ago".
func shortAgo(now, t time.Time) string {
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", max(int(d.Seconds()), 0))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

func (a *app) alertsAckCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ack ID",
		Short: "Acknowledge a firing alert",
		Long: `Acknowledge a firing alert: it is listed as acknowledged and its channels
are not notified of it again (they still hear when it resolves). Whoever
may cancel the alert's job may acknowledge it (admins any alert, such as
one about a project's budget); the acknowledgement, with
its reason, is recorded in the audit log (action alert.ack).`,
		Example: `  trainyard alerts ack 17
  trainyard alerts ack 17 --reason "image being rebuilt, see OPS-123"`,
		Args: exactArgs(1),
	}
	reason := cmd.Flags().String("reason", "", "why (recorded with the acknowledgement and in the audit log)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id, err := strconv.ParseInt(args[0], 10, 64)
		if err != nil || id <= 0 {
			return usageErrorf("invalid alert id %q: want a positive whole number (see trainyard alerts ls)", args[0])
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		al, err := c.AckAlert(cmd.Context(), id, *reason)
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "acknowledged alert %d (%s)\n", al.ID, al.Key)
		return nil
	}
	return cmd
}

func (a *app) alertsTestCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "test CHANNEL",
		Short: "Send a test notification to one alert channel",
		Long: `Ask the server to send a test notification to the named channel and report
whether it was accepted (a webhook answering 2xx). Needs the admin role.
The channel names are those under alerts.channels in the server config.`,
		Example: `  trainyard alerts test ops-webhook`,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			if err := c.TestAlertChannel(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "channel %s accepted the test notification\n", args[0])
			return nil
		},
	}
	return cmd
}
