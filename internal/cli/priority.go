package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

func (a *app) priorityCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "priority ID CLASS",
		Short: "Change a waiting job's priority class",
		Long: `Change the priority class of a queued or held job: low, normal, high or
urgent. The scheduler orders each pool's queue by class, then by submit
time, so a job raised to a higher class starts before the waiting jobs of
lower ones. The class must be one the job's project may use in its pool
(the quota's max priority, as at submit). The job's spec keeps the class it
was submitted with; 'trainyard show ID' shows the current one, and its
transitions who changed it. A job that has started cannot change class.`,
		Example: `  trainyard priority 12 high
  trainyard priority 12 normal`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseID(args[0])
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			job, err := c.SetPriority(cmd.Context(), id, args[1])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "job %d (%s) now has priority %s\n", job.ID, oneLine(job.State), oneLine(job.Priority))
			return nil
		},
	}
}
