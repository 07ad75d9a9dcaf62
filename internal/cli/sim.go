package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"trainyard/internal/domain"
	"trainyard/internal/simulate"
)

// simCmd runs the scheduler over a workload file in virtual time. It works
// offline: no server, no store, no executor.
func (a *app) simCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sim FILE",
		Short: "Simulate the scheduler over a workload file and report fairness and waits",
		Long: `sim runs the scheduler offline over a workload (pools, quotas, projects
and job streams, see docs/simulate.md) in virtual time and prints what it did:
utilisation per pool, each project's GPU-hours against its fair share, wait
time percentiles and preemptions.

The run is deterministic: the same file and seed give the same report. A week
of virtual time takes about a second.`,
		Example: `  trainyard sim testdata/fairshare.yaml
  trainyard sim workload.yaml -o json | jq '.projects[] | {project, share, target}'`,
		Args: exactArgs(1),
	}
	output, checkOutput := outputFlag(cmd, "json")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(); err != nil {
			return err
		}
		w, err := simulate.LoadFile(args[0])
		if err != nil {
			var fe domain.FieldErrors
			if errors.As(err, &fe) {
				lines := make([]string, len(fe))
				for i, f := range fe {
					lines[i] = "  " + f.Error()
				}
				return usageErrorf("workload %s is invalid (%d problem(s)):\n%s", args[0], len(fe), strings.Join(lines, "\n"))
			}
			return err
		}
		r, err := simulate.Run(w)
		if err != nil {
			return fmt.Errorf("simulate %s: %w", args[0], err)
		}
		if *output == "json" {
			return r.WriteJSON(cmd.OutOrStdout())
		}
		return r.WriteText(cmd.OutOrStdout())
	}
	return cmd
}
