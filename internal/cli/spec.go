package cli

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"trainyard/internal/domain"
)

func (a *app) specCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "spec",
		Short: "Work with job spec files offline",
		Args:  groupArgs,
		RunE:  func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.specSchemaCmd(), a.specValidateCmd())
	return cmd
}

// groupArgs rejects unknown subcommands of a command that only groups others.
func groupArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("unknown command %q for %q; run '%s --help' for the list", args[0], cmd.CommandPath(), cmd.CommandPath())
	}
	return nil
}

func (a *app) specSchemaCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "schema",
		Short: "Print the JSON Schema of the job spec",
		Long: `Print the JSON Schema of the job spec document, for editors and linters
(for example yaml-language-server).`,
		Example: `  trainyard spec schema > trainyard-spec.schema.json`,
		Args:    exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			s := a.env.schema()
			if !bytes.HasSuffix(s, []byte("\n")) {
				s = append(s, '\n')
			}
			_, err := cmd.OutOrStdout().Write(s)
			return err
		},
	}
}

func (a *app) specValidateCmd() *cobra.Command {
	var sets []string
	cmd := &cobra.Command{
		Use:   "validate FILE",
		Short: "Check a spec file without submitting it",
		Long: `Parse, default and validate a spec file ("-" reads standard input) without
contacting the server. Prints "ok", or every problem with its field path and
line, and exits 2. Checks that need the server (quotas, environments, secrets)
happen at submit.`,
		Example: `  trainyard spec validate train.yaml --set resources.gpus=2`,
		Args:    exactArgs(1),
	}
	cmd.Flags().StringArrayVar(&sets, "set", nil, "override a spec field, key=value (repeatable)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkSets(sets); err != nil {
			return err
		}
		doc, dir, err := readSpecFile(cmd, args[0])
		if err != nil {
			return err
		}
		sets = resolveWorkdir(doc, dir, sets)
		if _, err := a.env.loadSpec(doc, sets); err != nil {
			var fe domain.FieldErrors
			if errors.As(err, &fe) {
				return &exitError{code: ExitUsage, err: fe}
			}
			return usageErrorf("the job spec is invalid: %v", err)
		}
		fmt.Fprintln(cmd.OutOrStdout(), "ok")
		return nil
	}
	return cmd
}
