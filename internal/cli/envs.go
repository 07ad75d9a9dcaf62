package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
)

func (a *app) envCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "env",
		Short: "Register, list, show and deprecate software environments",
		Long: `An environment is the pinned software a job runs in (spec field env:
name@version). A version is immutable: a container image for cluster
executors, and for the local executor directories put in front of PATH,
variables and a check command that must succeed before a job's entrypoint
starts (a pass is trusted per node for the server's env_check_ttl). Jobs name NAME@VERSION; the built-in environment host is
the machine's own software. Registering and deprecating need role admin or
resource-admin; every user with a role reads. See docs/envs.md.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.envRegisterCmd(), a.envLsCmd(), a.envShowCmd(), a.envDeprecateCmd())
	return cmd
}

func (a *app) envRegisterCmd() *cobra.Command {
	var (
		file, image, check, description string
		prefix, vars                    []string
	)
	cmd := &cobra.Command{
		Use:   "register NAME [--image REF] [--path-prefix DIR]... [--var K=V]... [--check 'CMD ARGS'] [-f FILE]",
		Short: "Register a new version of an environment",
		Long: `Register NAME's next version (version 1 for a new name) and print its
reference, NAME@VERSION, for the spec's env field.

The definition comes from the flags, or from a YAML file (-f FILE, "-" for
standard input) with the fields image, path_prefix (a list), vars (a
mapping), check (a list, or one command line) and description; flags
override the file's fields (--path-prefix and --var add to them).
--check takes one command line, split into words like a shell does (quotes
group words; no variables or globs).

An --image given by tag is pinned: the server asks the image's registry
which manifest the tag names now and stores NAME:TAG@sha256:..., printed
here and by env show, so the version keeps running that image when the tag
moves. An image the registry does not have is refused. When the registry
cannot be asked, the tag is kept and a warning printed (or, on a server
that requires pinned images, registering is refused). An image given by
digest is kept as given. See docs/envs.md.

A definition that a stored version already has is not stored again: that
version is printed. Versions never change; to change an environment,
register a new version and deprecate the old one.`,
		Example: `  trainyard env register pytorch-2.4 --image registry.example.com/pytorch:2.4-cuda12 \
      --path-prefix /opt/pytorch-2.4/bin --var OMP_NUM_THREADS=8 \
      --check 'python3 -c "import torch"' --description "PyTorch 2.4, CUDA 12"
  trainyard env register pytorch-2.4 -f pytorch-2.4.yaml`,
		Args: exactArgs(1),
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "YAML file with the definition (\"-\": standard input)")
	cmd.Flags().StringVar(&image, "image", "", "container image reference, for executors that run containers; a tag is pinned by digest")
	cmd.Flags().StringArrayVar(&prefix, "path-prefix", nil, "absolute directory put in front of PATH (repeat for several, in order)")
	cmd.Flags().StringArrayVar(&vars, "var", nil, "environment variable K=V (repeatable); a job's env_vars override it")
	cmd.Flags().StringVar(&check, "check", "", "command that must succeed before a job's entrypoint (a pass is trusted per node for env_check_ttl), e.g. 'python3 -c \"import torch\"'")
	cmd.Flags().StringVar(&description, "description", "", "one line about the environment")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		def := apitypes.RegisterEnv{}
		if file != "" {
			var err error
			if def, err = readEnvFile(cmd.InOrStdin(), file); err != nil {
				return err
			}
		}
		def.Name = args[0]
		if image != "" {
			def.Image = image
		}
		def.PathPrefix = append(def.PathPrefix, prefix...)
		for _, kv := range vars {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return usageErrorf("--var %q is not K=V; e.g. --var OMP_NUM_THREADS=8", kv)
			}
			if def.Vars == nil {
				def.Vars = map[string]string{}
			}
			def.Vars[k] = v
		}
		if cmd.Flags().Changed("check") {
			argv, err := splitCommand(check)
			if err != nil {
				return usageErrorf("--check: %v", err)
			}
			def.Check = argv
		}
		if description != "" {
			def.Description = description
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		e, err := c.RegisterEnv(cmd.Context(), def)
		if err != nil {
			return err
		}
		stderr := cmd.ErrOrStderr()
		for _, w := range e.Warnings {
			fmt.Fprintln(stderr, "warning: "+oneLine(w))
		}
		if e.Created != nil && !*e.Created {
			fmt.Fprintf(stderr, "environment %s already has this definition; no new version\n", oneLine(e.Ref))
		} else {
			fmt.Fprintf(stderr, "registered environment %s\n", oneLine(e.Ref))
		}
		if e.Image != "" && e.Image != def.Image {
			fmt.Fprintf(stderr, "image %s pinned by digest: %s\n", oneLine(def.Image), oneLine(e.Image))
		}
		fmt.Fprintln(cmd.OutOrStdout(), oneLine(e.Ref))
		return nil
	}
	return cmd
}

// envFile is the YAML definition file; check is a list or one command line.
type envFile struct {
	Image       string            `yaml:"image"`
	PathPrefix  []string          `yaml:"path_prefix"`
	Vars        map[string]string `yaml:"vars"`
	Check       yaml.Node         `yaml:"check"`
	Description string            `yaml:"description"`
}

// readEnvFile reads a definition from path ("-": in).
func readEnvFile(in io.Reader, path string) (apitypes.RegisterEnv, error) {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(io.LimitReader(in, 1<<20))
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return apitypes.RegisterEnv{}, usageErrorf("cannot read environment file: %v", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var f envFile
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return apitypes.RegisterEnv{}, usageErrorf("environment file %s: %v (fields: image, path_prefix, vars, check, description)", path, err)
	}
	def := apitypes.RegisterEnv{Image: f.Image, PathPrefix: f.PathPrefix, Vars: f.Vars, Description: f.Description}
	switch f.Check.Kind {
	case 0:
	case yaml.ScalarNode:
		if def.Check, err = splitCommand(f.Check.Value); err != nil {
			return def, usageErrorf("environment file %s: check (line %d): %v", path, f.Check.Line, err)
		}
	case yaml.SequenceNode:
		if err := f.Check.Decode(&def.Check); err != nil {
			return def, usageErrorf("environment file %s: check (line %d): %v", path, f.Check.Line, err)
		}
	default:
		return def, usageErrorf("environment file %s: check (line %d) must be a list of words or one command line", path, f.Check.Line)
	}
	return def, nil
}

// splitCommand splits a command line into words like a POSIX shell, with
// quotes and backslashes but no expansion.
func splitCommand(s string) ([]string, error) {
	var (
		words []string
		cur   strings.Builder
		in    bool // inside a word
		quote rune
	)
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote == '\'':
			if r == '\'' {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case quote == '"':
			switch {
			case r == '"':
				quote = 0
			case r == '\\' && i+1 < len(rs) && strings.ContainsRune(`"\$`+"`", rs[i+1]):
				i++
				cur.WriteRune(rs[i])
			default:
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == '\\':
			if i+1 < len(rs) {
				i++
				cur.WriteRune(rs[i])
				in = true
			}
		case r == ' ' || r == '\t' || r == '\n':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c quote in %q", quote, s)
	}
	if in {
		words = append(words, cur.String())
	}
	if len(words) == 0 {
		return nil, errors.New("the command is empty")
	}
	return words, nil
}

// parseEnvArg reads NAME or NAME@N (version 0 for NAME).
func parseEnvArg(arg string) (string, int, error) {
	name, version, err := domain.ParseEnvRef(arg)
	if err != nil {
		return "", 0, usageErrorf("%v", err)
	}
	return name, version, nil
}

func (a *app) envLsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "ls [NAME]",
		Aliases: []string{"list"},
		Short:   "List environments and their versions",
		Long: `List every version of every environment (or of NAME) as a table: REF
(NAME@VERSION, what a spec's env names), IMAGE (its digest abbreviated;
whole with -o wide), PATH PREFIX, VARS (names), CHECK, CREATED and STATUS
(ok, or deprecated with the reason).`,
		Example: `  trainyard env ls
  trainyard env ls pytorch-2.4 -o json`,
		Args: cobra.MaximumNArgs(1),
	}
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		name := ""
		if len(args) == 1 {
			name = args[0]
		}
		c, err := a.clientChecked(checkOutput)
		if err != nil {
			return err
		}
		list, err := c.ListEnvs(cmd.Context(), name)
		if err != nil {
			return err
		}
		if list == nil {
			list = []apitypes.Env{}
		}
		out := cmd.OutOrStdout()
		if ok, err := writeStructured(out, *output, apitypes.EnvList{Envs: list}); ok {
			return err
		}
		if len(list) == 0 {
			fmt.Fprintln(cmd.ErrOrStderr(), "no environments; register one with: trainyard env register NAME --image REF | --path-prefix DIR")
			return nil
		}
		now := a.env.now()
		tw := newTable(out)
		fmt.Fprintln(tw, "REF\tIMAGE\tPATH PREFIX\tVARS\tCHECK\tCREATED\tSTATUS")
		for _, e := range list {
			image := e.Image
			if *output != formatWide {
				image = shortImage(image)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(e.Ref), cell(image), cell(strings.Join(e.PathPrefix, ":")),
				cell(strings.Join(slices.Sorted(maps.Keys(e.Vars)), ",")), cell(quoteCommand(e.Check)), age(now, e.CreatedAt), cell(envStatus(e)))
		}
		return tw.Flush()
	}
	return cmd
}

// envStatus is "ok", or "deprecated" with the reason.
func envStatus(e apitypes.Env) string {
	switch {
	case !e.Deprecated:
		return "ok"
	case e.DeprecatedReason == "":
		return "deprecated"
	}
	return "deprecated: " + e.DeprecatedReason
}

func (a *app) envShowCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show NAME[@VERSION]",
		Short: "Show one version of an environment",
		Long: `Show environment NAME@VERSION, or NAME's latest version: its image (as
stored: pinned by digest, or marked as by tag only), PATH prefix, variables,
check command, digest, who registered it and when, and whether it is
deprecated.`,
		Example: `  trainyard env show pytorch-2.4@3
  trainyard env show pytorch-2.4 -o yaml`,
		Args: exactArgs(1),
	}
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(); err != nil {
			return err
		}
		name, version, err := parseEnvArg(args[0])
		if err != nil {
			return err
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		var e apitypes.Env
		if version == 0 {
			list, err := c.ListEnvs(cmd.Context(), name)
			if err != nil {
				return err
			}
			if len(list) == 0 {
				return exitErrorf(ExitNotFound, "no environment is named %s; list environments with: trainyard env ls", name)
			}
			e = list[len(list)-1]
		} else if e, err = c.GetEnv(cmd.Context(), name, version); err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if ok, err := writeStructured(out, *output, e); ok {
			return err
		}
		fmt.Fprintf(out, "Environment: %s\n", oneLine(e.Ref))
		fmt.Fprintf(out, "Status:      %s\n", oneLine(envStatus(e)))
		if e.DeprecatedAt != nil {
			fmt.Fprintf(out, "Deprecated:  %s\n", e.DeprecatedAt.Format("2006-01-02 15:04:05 MST"))
		}
		fmt.Fprintf(out, "Created:     %s by %s\n", e.CreatedAt.Format("2006-01-02 15:04:05 MST"), oneLine(e.CreatedBy))
		fmt.Fprintf(out, "Digest:      %s\n", oneLine(e.Digest))
		if e.Description != "" {
			fmt.Fprintf(out, "About:       %s\n", oneLine(firstLine(e.Description)))
		}
		fmt.Fprintf(out, "Image:       %s\n", orNone(oneLine(e.Image)+imageNote(e.Image)))
		fmt.Fprintf(out, "PATH prefix: %s\n", orNone(oneLine(strings.Join(e.PathPrefix, ":"))))
		fmt.Fprintf(out, "Check:       %s\n", orNone(oneLine(quoteCommand(e.Check))))
		if len(e.Vars) == 0 {
			fmt.Fprintln(out, "Variables:   (none)")
			return nil
		}
		fmt.Fprintln(out, "Variables:")
		for _, k := range slices.Sorted(maps.Keys(e.Vars)) {
			fmt.Fprintf(out, "  %s=%s\n", oneLine(k), oneLine(e.Vars[k]))
		}
		return nil
	}
	return cmd
}

// shortImage abbreviates the digest of a pinned image reference for a
// table: reg/torch:2.4@sha256:0123456789ab… (-o wide and env show print
// it whole).
func shortImage(image string) string {
	name, digest, ok := strings.Cut(image, "@")
	if !ok {
		return image
	}
	alg, hex, ok := strings.Cut(digest, ":")
	if !ok || len(hex) <= 12 {
		return image
	}
	return name + "@" + alg + ":" + hex[:12] + "…"
}

// imageNote says when an image is named by tag only: what it runs may
// change when the tag moves.
func imageNote(image string) string {
	if image == "" || strings.Contains(image, "@") {
		return ""
	}
	return " (by tag, not pinned by digest)"
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// quoteWord quotes w for a shell when it needs it.
func quoteWord(w string) string {
	if w != "" && !strings.ContainsAny(w, " \t\n'\"\\$`*?;&|<>()#~") {
		return w
	}
	return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
}

func (a *app) envDeprecateCmd() *cobra.Command {
	var reason string
	var all bool
	cmd := &cobra.Command{
		Use:   "deprecate NAME@VERSION [--reason TEXT]",
		Short: "Deprecate a version of an environment",
		Long: `Mark NAME@VERSION deprecated (with --all: every version of NAME). Jobs
submitted afterwards may not use it: submit refuses them with the reason
and the version to use instead. Jobs submitted before keep running in it.
Deprecation cannot be undone; register a new version instead.`,
		Example: `  trainyard env deprecate pytorch-2.4@2 --reason "CVE-2025-1234 in the base image"
  trainyard env deprecate pytorch-2.3 --all --reason retired`,
		Args: exactArgs(1),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, shown to everyone whose submit is refused")
	cmd.Flags().BoolVar(&all, "all", false, "deprecate every version of NAME")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		name, version, err := parseEnvArg(args[0])
		if err != nil {
			return err
		}
		switch {
		case version == 0 && !all:
			return usageErrorf("name the version, e.g. %s@1, or deprecate every version with --all", name)
		case version != 0 && all:
			return usageErrorf("--all deprecates every version of %s; give the name without @%d", name, version)
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		list, err := c.DeprecateEnv(cmd.Context(), name, version, reason)
		if err != nil {
			return err
		}
		for _, e := range list {
			fmt.Fprintf(cmd.OutOrStdout(), "%s\t%s\n", oneLine(e.Ref), oneLine(envStatus(e)))
		}
		return nil
	}
	return cmd
}

// quoteCommand renders a command's words as one shell line, each word
// quoted where the shell would split or expand it, so what is shown is what
// runs: python3 -c 'import torch'.
func quoteCommand(words []string) string {
	quoted := make([]string, len(words))
	for i, w := range words {
		quoted[i] = quoteWord(w)
	}
	return strings.Join(quoted, " ")
}
