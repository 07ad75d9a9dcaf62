package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

func (a *app) statusCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show whether the server is ready and which replica leads",
		Long: `Ask the server's /readyz which replica answered and which replica leads (runs
the scheduler, alerts and retention). Several replicas share one PostgreSQL
store; a single server on SQLite always leads. Exits 1 when the server is not
ready.`,
		Example: `  trainyard status
  trainyard status -o json`,
		Args: exactArgs(0),
	}
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := a.clientChecked(checkOutput)
		if err != nil {
			return err
		}
		st, err := c.Status(cmd.Context())
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if done, err := writeStructured(out, *output, st); done {
			return err
		}
		defer func() {
			if st.Isolation != "" {
				fmt.Fprintf(out, "isolation: %s\n", st.Isolation)
			}
			if st.Hardware != "" {
				fmt.Fprintf(out, "hardware: %s\n", oneLine(st.Hardware))
			}
		}()
		if st.Replica == "" {
			fmt.Fprintln(out, "ready: a single server, which leads")
			return nil
		}
		fmt.Fprintf(out, "ready: replica %s (store %s)\n", oneLine(st.Replica), oneLine(st.Store))
		switch {
		case st.Leading:
			fmt.Fprintf(out, "leader: this replica (term %d)\n", st.Epoch)
		case st.Leader != "":
			fmt.Fprintf(out, "leader: %s (term %d)\n", oneLine(st.Leader), st.Epoch)
		default:
			fmt.Fprintln(out, "leader: none yet (an election is under way)")
		}
		return nil
	}
	return cmd
}
