package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"trainyard/internal/api/apitypes"
)

// maxSecretInput bounds what secret set reads from stdin; the server
// refuses values over 32 KiB with a clear message.
const maxSecretInput = 1 << 20

func (a *app) secretCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "secret",
		Short: "Set, list and remove secrets; rotate the master key",
		Long: `Secrets are values a job needs but nobody should read: API keys, tokens,
passwords. The server stores them encrypted; a job lists the names it needs
under secrets: in its spec and gets each as an environment variable of that
name. Values never appear in logs ([redacted]), job details, API answers or
the audit log.

A secret is global, or belongs to a project (--project). A project's secret
hides a global one of the same name from that project's jobs. See
docs/secrets.md.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.secretSetCmd(), a.secretLsCmd(), a.secretRmCmd(), a.secretRotateKeyCmd())
	return cmd
}

func (a *app) secretSetCmd() *cobra.Command {
	var project string
	cmd := &cobra.Command{
		Use:   "set NAME",
		Short: "Store a secret's value, read from stdin",
		Long: `Store the value read from standard input as secret NAME: global, or the
project's with --project. The value is never taken from the command line,
where the shell history and the process list would show it. One trailing
newline is removed. On a terminal the value is asked for without echo.

Setting an existing secret stores a new version; jobs launched from then
on get it. Names are uppercase letters, digits and '_' (e.g. WANDB_API_KEY);
values need at least 4 bytes.`,
		Example: `  trainyard secret set WANDB_API_KEY --project vision < wandb.key
  printf '%s' "$TOKEN" | trainyard secret set HF_TOKEN
  trainyard secret set DB_PASSWORD          # asks for the value`,
		Args: exactArgs(1),
	}
	cmd.Flags().StringVarP(&project, "project", "p", "", "the project the secret belongs to (default: global)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		value, err := readSecretValue(cmd.InOrStdin(), cmd.ErrOrStderr(), args[0])
		if err != nil {
			return err
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		s, err := c.SetSecret(cmd.Context(), args[0], project, value)
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "set %s, version %d\n", secretScope(s), s.Version)
		return nil
	}
	return cmd
}

// readSecretValue reads a value from in: without echo, one line, when in is
// a terminal; otherwise everything, minus one trailing newline.
func readSecretValue(in io.Reader, prompt io.Writer, name string) (string, error) {
	var b []byte
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprintf(prompt, "Value of %s (not shown): ", name)
		v, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(prompt)
		if err != nil {
			return "", fmt.Errorf("read the value from the terminal: %w", err)
		}
		b = v
	} else {
		v, err := io.ReadAll(io.LimitReader(in, maxSecretInput+1))
		if err != nil {
			return "", fmt.Errorf("read the value from stdin: %w", err)
		}
		if len(v) > maxSecretInput {
			return "", usageErrorf("the value on stdin is larger than %d bytes", maxSecretInput)
		}
		b = v
	}
	b = bytes.TrimSuffix(b, []byte("\n"))
	b = bytes.TrimSuffix(b, []byte("\r"))
	if len(b) == 0 {
		return "", usageErrorf("no value on stdin; pipe it in, e.g.: trainyard secret set %s < file", name)
	}
	if !utf8.Valid(b) {
		return "", usageErrorf("the value is not UTF-8 text; encode binary values first, e.g. with base64")
	}
	return string(b), nil
}

// secretScope names a secret for people: "global secret X" or "secret X of
// project p".
func secretScope(s apitypes.Secret) string {
	if s.Project == "" {
		return "global secret " + oneLine(s.Name)
	}
	return "secret " + oneLine(s.Name) + " of project " + oneLine(s.Project)
}

func (a *app) secretLsCmd() *cobra.Command {
	var project string
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List secrets (names and versions, never values)",
		Long: `List secrets as a table: NAME, PROJECT ("-" for global), VERSION, SET BY,
SET (how long ago the newest version was set) and KEY (the master key that
sealed it). With --project, the project's secrets and the global ones its
jobs see; a global secret the project overrides is marked (shadowed).
Values are never shown.`,
		Example: `  trainyard secret ls
  trainyard secret ls --project vision -o json`,
		Args: exactArgs(0),
	}
	cmd.Flags().StringVarP(&project, "project", "p", "", "show what this project's jobs see")
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := a.clientChecked(checkOutput)
		if err != nil {
			return err
		}
		list, err := c.ListSecrets(cmd.Context(), project)
		if err != nil {
			return err
		}
		if list == nil {
			list = []apitypes.Secret{}
		}
		out := cmd.OutOrStdout()
		if ok, err := writeStructured(out, *output, apitypes.SecretList{Secrets: list}); ok {
			return err
		}
		if len(list) == 0 {
			fmt.Fprintln(cmd.ErrOrStderr(), "no secrets; store one with: trainyard secret set NAME [--project P] < value-file")
			return nil
		}
		now := a.env.now()
		tw := newTable(out)
		fmt.Fprintln(tw, "NAME\tPROJECT\tVERSION\tSET BY\tSET\tKEY")
		for _, s := range list {
			name := s.Name
			if s.Shadowed {
				name += " (shadowed)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", cell(name), cell(s.Project), s.Version, cell(s.CreatedBy), age(now, s.CreatedAt), cell(s.KeyID))
		}
		return tw.Flush()
	}
	return cmd
}

func (a *app) secretRmCmd() *cobra.Command {
	var project string
	cmd := &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a secret, every version",
		Long: `Remove secret NAME (global, or the project's with --project) with every
stored version. Jobs already running keep the value they started with; jobs
that name it and have not started yet fail at launch, unless a global secret
of the same name remains.`,
		Example: `  trainyard secret rm WANDB_API_KEY --project vision`,
		Args:    exactArgs(1),
	}
	cmd.Flags().StringVarP(&project, "project", "p", "", "the project the secret belongs to (default: global)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := a.client()
		if err != nil {
			return err
		}
		if err := c.DeleteSecret(cmd.Context(), args[0], project); err != nil {
			return err
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "removed %s\n", secretScope(apitypes.Secret{Name: args[0], Project: project}))
		return nil
	}
	return cmd
}

func (a *app) secretRotateKeyCmd() *cobra.Command {
	var keyFile string
	cmd := &cobra.Command{
		Use:   "rotate-key --new-key-file FILE",
		Short: "Re-encrypt every secret under a new master key",
		Long: `Re-encrypt every stored secret under the master key in FILE, in one
transaction, and make the server use that key. FILE is read by the server,
so it is a path on the server's machine (a relative path is made absolute
here); it must hold 32 random bytes or their base64, with mode 0600.

Afterwards point the server at the new key (master_key_file in its config,
--master-key-file, or TRAINYARD_MASTER_KEY) before it restarts, and keep the
old key until you have checked the result. See docs/secrets.md.`,
		Example: `  head -c 32 /dev/urandom > /var/lib/trainyard/master-2.key
  chmod 600 /var/lib/trainyard/master-2.key
  trainyard secret rotate-key --new-key-file /var/lib/trainyard/master-2.key`,
		Args: exactArgs(0),
	}
	cmd.Flags().StringVar(&keyFile, "new-key-file", "", "file holding the new master key, on the server's machine (required)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if keyFile == "" {
			return usageErrorf("--new-key-file is required; usage: %s", cmd.UseLine())
		}
		abs, err := filepath.Abs(keyFile)
		if err != nil {
			return usageErrorf("cannot resolve --new-key-file %q: %v", keyFile, err)
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		res, err := c.RotateKey(cmd.Context(), abs)
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "re-encrypted %d secret version(s): master key %s replaced by %s\n", res.Resealed, res.OldKeyID, res.NewKeyID)
		fmt.Fprintf(cmd.ErrOrStderr(), "now configure the server to load %s at its next start (master_key_file or --master-key-file); keep the old key until you have checked the result\n", abs)
		return nil
	}
	return cmd
}
