package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/client"
	"trainyard/internal/jobspec"
)

func (a *app) templateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "template",
		Short: "Create, list and show job templates",
		Long: `A job template is a job spec with ${var} placeholders in its values and a
vars: block that declares each variable, with an optional default and
description. Submit from it with:

    trainyard submit --template NAME[@VERSION] --set var=value ...

Dev, test and prod runs of one template differ only in their variables.
Templates belong to a project and are versioned: creating a template again
adds a version; NAME means the latest, NAME@N version N. They may not hold
secrets: list secret names under secrets: and store the values with
trainyard secret set. See docs/templates.md.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.templateCreateCmd(), a.templateLsCmd(), a.templateShowCmd())
	return cmd
}

func (a *app) templateCreateCmd() *cobra.Command {
	var file, project string
	cmd := &cobra.Command{
		Use:   "create NAME -f FILE",
		Short: "Create a template, or a new version of one",
		Long: `Store the template in FILE ("-" reads standard input) as template NAME of the
project (--project; default: the project the file names, else "default").

If NAME exists, the file becomes its next version, unless it is byte for
byte the latest version: then nothing is stored and that is said. Versions
never change once stored.

The server checks the template before storing it: every ${var} is declared,
every variable is used, no env_vars or params entry looks like a credential,
and with the variables' defaults it is a valid job spec. Every problem is
printed with its line; the exit code is then 2.`,
		Example: `  trainyard template create resnet -f resnet.tmpl.yaml --project vision
  trainyard template create resnet -f - < resnet.tmpl.yaml`,
		Args: exactArgs(1),
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "the template file (\"-\": standard input)")
	cmd.Flags().StringVarP(&project, "project", "p", "", "the project the template belongs to (default: the file's project, else default)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if file == "" {
			return usageErrorf("--file is required: trainyard template create %s -f FILE", args[0])
		}
		body, err := readTemplateFile(cmd.InOrStdin(), file)
		if err != nil {
			return err
		}
		if file != "-" {
			dir, err := filepath.Abs(filepath.Dir(file))
			if err != nil {
				return fmt.Errorf("resolve the directory of %s: %w", file, err)
			}
			body = resolveTemplateWorkdir(body, dir)
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		t, err := c.CreateTemplate(cmd.Context(), args[0], project, string(body))
		if err != nil {
			return err
		}
		if t.Created != nil && !*t.Created {
			fmt.Fprintf(cmd.ErrOrStderr(), "template %s@%d of project %s is already this file; no new version\n", oneLine(t.Name), t.Version, oneLine(t.Project))
		} else {
			fmt.Fprintf(cmd.ErrOrStderr(), "created template %s@%d of project %s\n", oneLine(t.Name), t.Version, oneLine(t.Project))
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s@%d\n", oneLine(t.Name), t.Version)
		return nil
	}
	return cmd
}

// resolveTemplateWorkdir makes a relative top-level workdir of a template
// file absolute against dir, the file's directory, as submit does for a
// spec file. Only that value changes: the rest of the document is sent as
// written. A workdir with a ${var}, or a document that does not parse, is
// left alone (the server reports the errors, with lines).
func resolveTemplateWorkdir(body []byte, dir string) []byte {
	var doc yaml.Node
	if err := yaml.Unmarshal(body, &doc); err != nil || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return body
	}
	top := doc.Content[0]
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		if k.Value != "workdir" || v.Kind != yaml.ScalarNode || v.Value == "" || filepath.IsAbs(v.Value) || strings.Contains(v.Value, "${") {
			continue
		}
		// Replace the value in place, on its line: the server's line
		// numbers still match the file.
		lines := strings.Split(string(body), "\n")
		if v.Line < 1 || v.Line > len(lines) {
			return body
		}
		line := lines[v.Line-1]
		col := v.Column - 1
		if col < 0 || col > len(line) {
			return body
		}
		rest := line[col:]
		end := len(rest)
		if v.Style == 0 { // plain: up to a comment
			if c := strings.Index(rest, " #"); c >= 0 {
				end = c
			}
			end = len(strings.TrimRight(rest[:end], " \t"))
		} else if j := strings.LastIndexAny(rest, `"'`); j > 0 {
			end = j + 1
		}
		abs, _ := json.Marshal(filepath.Join(dir, v.Value))
		lines[v.Line-1] = line[:col] + string(abs) + rest[end:]
		return []byte(strings.Join(lines, "\n"))
	}
	return body
}

// readTemplateFile reads path, or standard input for "-".
func readTemplateFile(in io.Reader, path string) ([]byte, error) {
	if path == "-" {
		b, err := io.ReadAll(io.LimitReader(in, jobspec.MaxDocumentBytes+1))
		if err != nil {
			return nil, fmt.Errorf("read the template from standard input: %w", err)
		}
		return b, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usageErrorf("cannot read template file: %v", err)
	}
	return b, nil
}

func (a *app) templateLsCmd() *cobra.Command {
	var project string
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List templates (the latest version of each)",
		Long: `List templates as a table: NAME, PROJECT, VERSION (the latest), VARS (the
variables; a trailing * marks a required one), CREATED BY, CREATED (how long
ago the latest version was stored) and DESCRIPTION. --project shows one
project's templates.`,
		Example: `  trainyard template ls
  trainyard template ls --project vision -o json`,
		Args: exactArgs(0),
	}
	cmd.Flags().StringVarP(&project, "project", "p", "", "only this project's templates")
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := a.clientChecked(checkOutput)
		if err != nil {
			return err
		}
		list, err := c.ListTemplates(cmd.Context(), project)
		if err != nil {
			return err
		}
		if list == nil {
			list = []apitypes.Template{}
		}
		out := cmd.OutOrStdout()
		if ok, err := writeStructured(out, *output, apitypes.TemplateList{Templates: list}); ok {
			return err
		}
		if len(list) == 0 {
			fmt.Fprintln(cmd.ErrOrStderr(), "no templates; create one with: trainyard template create NAME -f FILE [--project P]")
			return nil
		}
		now := a.env.now()
		tw := newTable(out)
		fmt.Fprintln(tw, "NAME\tPROJECT\tVERSION\tVARS\tCREATED BY\tCREATED\tDESCRIPTION")
		for _, t := range list {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", cell(t.Name), cell(t.Project), t.Version, cell(varNames(t.Vars)),
				cell(t.CreatedBy), age(now, t.CreatedAt), cell(firstLine(t.Description)))
		}
		return tw.Flush()
	}
	return cmd
}

// varNames lists variables as "a,b*,c" (* marks required ones).
func varNames(vars []apitypes.TemplateVar) string {
	names := make([]string, len(vars))
	for i, v := range vars {
		names[i] = v.Name
		if v.Required {
			names[i] += "*"
		}
	}
	return strings.Join(names, ",")
}

// firstLine is the first line of s.
func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

func (a *app) templateShowCmd() *cobra.Command {
	var project string
	cmd := &cobra.Command{
		Use:   "show NAME[@VERSION]",
		Short: "Show a template's variables and document",
		Long: `Show template NAME (the latest version) or NAME@VERSION: who stored it and
when, its variables with their defaults, and the document as written.
Without --project, the template is looked up in every project; a name used
in several projects needs --project.`,
		Example: `  trainyard template show resnet
  trainyard template show resnet@2 --project vision -o yaml`,
		Args: exactArgs(1),
	}
	cmd.Flags().StringVarP(&project, "project", "p", "", "the template's project (default: the one project that has it)")
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(); err != nil {
			return err
		}
		name, version, err := jobspec.ParseTemplateRef(args[0])
		if err != nil {
			return usageErrorf("%v", err)
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		t, err := c.GetTemplate(cmd.Context(), project, name, version)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if ok, err := writeStructured(out, *output, t); ok {
			return err
		}
		fmt.Fprintf(out, "Template:  %s@%d\n", oneLine(t.Name), t.Version)
		fmt.Fprintf(out, "Project:   %s\n", oneLine(t.Project))
		fmt.Fprintf(out, "Created:   %s by %s\n", t.CreatedAt.Format("2006-01-02 15:04:05 MST"), oneLine(t.CreatedBy))
		fmt.Fprintf(out, "Hash:      %s\n", oneLine(t.Hash))
		if t.Description != "" {
			fmt.Fprintf(out, "About:     %s\n", oneLine(firstLine(t.Description)))
		}
		if len(t.Vars) > 0 {
			fmt.Fprintln(out, "\nVariables:")
			tw := newTable(out)
			fmt.Fprintln(tw, "  NAME\tDEFAULT\tDESCRIPTION")
			for _, v := range t.Vars {
				def := "(required)"
				if v.Default != nil {
					def = fmt.Sprintf("%q", *v.Default)
				}
				desc := v.Description
				if len(v.Allowed) > 0 {
					desc = strings.TrimSpace(desc + " [one of: " + strings.Join(v.Allowed, ", ") + "]")
				}
				fmt.Fprintf(tw, "  %s\t%s\t%s\n", cell(v.Name), cell(def), cell(desc))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
		fmt.Fprintf(out, "\n---\n%s", text(t.Body))
		if !strings.HasSuffix(t.Body, "\n") {
			fmt.Fprintln(out)
		}
		return nil
	}
	return cmd
}

// submitArgs wants FILE, or no argument with --template.
func submitArgs(template *string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case *template != "" && len(args) > 0:
			return usageErrorf("give a spec FILE or --template, not both; usage: %s", cmd.UseLine())
		case *template == "":
			return exactArgs(1)(cmd, args)
		}
		return nil
	}
}

// templateSubmitRequest builds the submit request for --template ref: it
// reads the template to split sets into its variables and spec overrides,
// and pins the version it read, so the job is made from what was read.
func templateSubmitRequest(ctx context.Context, c *client.Client, ref, project string, sets []string) (apitypes.SubmitRequest, error) {
	name, version, err := jobspec.ParseTemplateRef(ref)
	if err != nil {
		return apitypes.SubmitRequest{}, usageErrorf("invalid --template: %v", err)
	}
	t, err := c.GetTemplate(ctx, project, name, version)
	if err != nil {
		return apitypes.SubmitRequest{}, err
	}
	names := make([]string, len(t.Vars))
	for i, v := range t.Vars {
		names[i] = v.Name
	}
	vars, overrides, err := jobspec.SplitTemplateSets(names, sets)
	if err != nil {
		return apitypes.SubmitRequest{}, usageErrorf("%v (template %s@%d; see: trainyard template show %s@%d)", err, t.Name, t.Version, t.Name, t.Version)
	}
	return apitypes.SubmitRequest{Template: fmt.Sprintf("%s@%d", t.Name, t.Version), Project: t.Project, Vars: vars, Set: overrides}, nil
}
