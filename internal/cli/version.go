package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"trainyard/internal/api/apitypes"
)

// versionOutput is the -o json|yaml form of `trainyard version`.
type versionOutput struct {
	Client      apitypes.Version  `json:"client"`
	Server      *apitypes.Version `json:"server,omitempty"`
	ServerURL   string            `json:"server_url"`
	ServerError string            `json:"server_error,omitempty"`
}

func (a *app) versionCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the client version and, if reachable, the server's",
		Args:  exactArgs(0),
	}
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(); err != nil {
			return err
		}
		v := versionOutput{Client: apitypes.Version{Version: dash(a.info.Version), Commit: a.info.Commit}}
		c, err := a.probeClient()
		if err == nil {
			v.ServerURL = c.BaseURL()
			var sv apitypes.Version
			if sv, err = c.Version(cmd.Context()); err == nil {
				v.Server = &sv
			}
		}
		if err != nil {
			v.ServerError = err.Error()
		}

		out := cmd.OutOrStdout()
		if ok, err := writeStructured(out, *output, v); ok {
			return err
		}
		fmt.Fprintf(out, "client: %s\n", versionLine(v.Client))
		if v.Server != nil {
			fmt.Fprintf(out, "server: %s at %s\n", versionLine(*v.Server), v.ServerURL)
		} else {
			fmt.Fprintln(out, "server: unavailable")
			fmt.Fprintf(cmd.ErrOrStderr(), "note: %s\n", v.ServerError)
		}
		return nil
	}
	return cmd
}

// versionLine renders "0.3.1 (commit abc123, store sqlite)".
func versionLine(v apitypes.Version) string {
	s := dash(v.Version)
	var extra []string
	if v.Commit != "" {
		extra = append(extra, "commit "+v.Commit)
	}
	if v.Store != "" {
		extra = append(extra, "store "+v.Store)
	}
	for i, e := range extra {
		if i == 0 {
			s += " ("
		} else {
			s += ", "
		}
		s += e
	}
	if len(extra) > 0 {
		s += ")"
	}
	return s
}
