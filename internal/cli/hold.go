package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

func (a *app) holdCmd() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "hold ID",
		Short: "Keep a queued job out of scheduling",
		Long: `Hold a queued job: it stays in state held, out of scheduling, until
'trainyard release ID'. Only a queued job can be held; a running one keeps
running (cancel it instead). Holding a held job changes nothing.`,
		Example: `  trainyard hold 12 --reason "waiting for the new dataset"
  trainyard release 12`,
		Args: exactArgs(1),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the job's history")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id, err := parseID(args[0])
		if err != nil {
			return err
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		job, err := c.Hold(cmd.Context(), id, reason)
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "held job %d; release it with: trainyard release %d\n", job.ID, job.ID)
		return nil
	}
	return cmd
}

func (a *app) releaseCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "release ID",
		Short: "Put a held job back in the queue",
		Long: `Release a held job: it is queued again and scheduled by its priority and
submit time, as before it was held. Releasing a queued job changes nothing.`,
		Example: `  trainyard release 12`,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseID(args[0])
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			job, err := c.Release(cmd.Context(), id)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "released job %d (%s)\n", job.ID, oneLine(job.State))
			return nil
		},
	}
}
