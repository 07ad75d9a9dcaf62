package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
)

func (a *app) uiCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Print a link that signs you in to the web pages",
		Long: `Print a link to the server's web pages that signs you in as yourself. The
link holds a token of its own that lasts 10 minutes and works once: the
sign-in page reads it from the part after '#', which the browser never
sends to a server or keeps in its logs, and deletes it once the session
is made. The session lasts 12 hours; sign out to end it sooner.`,
		Example: `  trainyard ui
  trainyard ui --server https://trainyard.example.com`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := a.resolveConfig()
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			t, err := c.CreateToken(cmd.Context(), apitypes.TokenRequest{Name: domain.SignInLinkToken, Expires: "10m"})
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.ErrOrStderr(), "Open this link within 10 minutes to sign in; it works once:")
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s/signin#token=%s\n", strings.TrimRight(cfg.Server, "/"), t.Token)
			return err
		},
	}
	return cmd
}
