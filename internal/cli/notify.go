package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"trainyard/internal/api/apitypes"
)

func (a *app) notifyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "notify",
		Short: "Show, set and clear your default job-end notification",
		Long: `When a job ends (succeeded, failed or canceled) the server can tell you:
on a channel the admin configured (a webhook or Slack; names from the server's
alerts.channels) or by e-mail (when the admin configured a mail relay). A job's
own notify section decides for that job; your default applies to your jobs
that have none. Each job end is notified once per channel or address, with a
link to the job. See docs/observability.md#job-end-notifications.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.notifyShowCmd(), a.notifySetCmd(), a.notifyClearCmd())
	return cmd
}

func (a *app) notifyShowCmd() *cobra.Command {
	var user string
	cmd := &cobra.Command{
		Use:     "show",
		Short:   "Show your default job-end notification",
		Example: "  trainyard notify show\n  trainyard notify show -o json",
		Args:    exactArgs(0),
	}
	cmd.Flags().StringVar(&user, "user", "", "another user's (admins only)")
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := a.clientChecked(checkOutput)
		if err != nil {
			return err
		}
		p, err := c.GetNotify(cmd.Context(), user)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if ok, err := writeStructured(out, *output, p); ok {
			return err
		}
		return writeNotify(out, p)
	}
	return cmd
}

func writeNotify(w io.Writer, p apitypes.NotifyPref) error {
	on := "succeeded, failed, canceled"
	if len(p.On) > 0 {
		on = strings.Join(p.On, ", ")
	}
	list := func(v []string) string {
		if len(v) == 0 {
			return "-"
		}
		return strings.Join(v, ", ")
	}
	_, err := fmt.Fprintf(w, "user:      %s\non:        %s\nchannels:  %s\nemail:     %s\nupdated:   %s\n",
		cell(p.User), on, cell(list(p.Channels)), cell(list(p.Email)), p.UpdatedAt.UTC().Format("2006-01-02 15:04:05 UTC"))
	return err
}

func (a *app) notifySetCmd() *cobra.Command {
	var (
		user             string
		on, email, chans []string
	)
	cmd := &cobra.Command{
		Use:   "set",
		Short: "Set your default job-end notification",
		Long: `Set the notification that applies to your jobs whose spec has no notify
section. It replaces the one you had. Give at least one --channel or --email;
--on defaults to all of succeeded, failed and canceled.`,
		Example: `  trainyard notify set --on failed,canceled --email me@example.com
  trainyard notify set --channel team-slack`,
		Args: exactArgs(0),
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&on, "on", nil, "end states that notify: succeeded, failed, canceled (default: all three)")
	fl.StringSliceVar(&chans, "channel", nil, "a channel the admin configured (alerts.channels), repeatable")
	fl.StringSliceVar(&email, "email", nil, "an e-mail address, repeatable")
	fl.StringVar(&user, "user", "", "another user's (admins only)")
	_ = cmd.RegisterFlagCompletionFunc("on", completeFrom([]string{"succeeded", "failed", "canceled"}))
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(chans) == 0 && len(email) == 0 {
			return usageErrorf("give at least one --channel or --email to notify")
		}
		c, err := a.clientChecked(checkOutput)
		if err != nil {
			return err
		}
		p, err := c.PutNotify(cmd.Context(), user, apitypes.NotifyPref{On: on, Channels: chans, Email: email})
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if ok, err := writeStructured(out, *output, p); ok {
			return err
		}
		return writeNotify(out, p)
	}
	return cmd
}

func (a *app) notifyClearCmd() *cobra.Command {
	var user string
	cmd := &cobra.Command{
		Use:     "clear",
		Short:   "Clear your default job-end notification",
		Example: "  trainyard notify clear",
		Args:    exactArgs(0),
	}
	cmd.Flags().StringVar(&user, "user", "", "another user's (admins only)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := a.client()
		if err != nil {
			return err
		}
		if err := c.DeleteNotify(cmd.Context(), user); err != nil {
			return err
		}
		who := "your"
		if user != "" {
			who = user + "'s"
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "cleared %s default notification\n", who)
		return nil
	}
	return cmd
}
