package cli

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

func (a *app) docsCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "docs DIR",
		Short:  "Write the CLI reference as markdown into DIR",
		Hidden: true,
		Long: `Write the CLI reference, one markdown page per command, into DIR (created
when missing). Pages of commands that no longer exist are removed.`,
		Example: `  trainyard docs docs/cli`,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := GenDocs(cmd.Root(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote the CLI reference to %s\n", args[0])
			return nil
		},
	}
}

// GenDocs writes the markdown reference of root's visible commands into dir,
// replacing the trainyard*.md pages there. The output depends only on the
// command definitions (no dates or versions), so it can be checked in and
// compared.
func GenDocs(root *cobra.Command, dir string) error {
	root.DisableAutoGenTag = true
	root.InitDefaultCompletionCmd() // Execute adds it; document it too
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create docs directory %s: %w", dir, err)
	}
	old, err := filepath.Glob(filepath.Join(dir, "trainyard*.md"))
	if err != nil {
		return fmt.Errorf("list old pages in %s: %w", dir, err)
	}
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			return fmt.Errorf("remove old page %s: %w", f, err)
		}
	}
	if err := doc.GenMarkdownTree(root, dir); err != nil {
		return fmt.Errorf("write the CLI reference to %s: %w", dir, err)
	}
	return nil
}
