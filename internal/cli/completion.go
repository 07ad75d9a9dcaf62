package cli

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"trainyard/internal/client"
	"trainyard/internal/domain"
)

// completionTimeout bounds a completion's call to the server: a shell waits
// on it while the user waits on the shell.
const completionTimeout = 3 * time.Second

// completionJobs is how many of the newest jobs a job-id completion offers.
const completionJobs = 100

// Which commands complete what, by command path below the root. One table,
// so a command's completion is found in one place; addCompletions panics on
// a path or flag that does not exist, so every test that builds a root
// catches a renamed command.
var (
	jobIDArg   = []string{"show", "logs", "cancel", "hold", "release", "why", "rerun", "artifacts ls", "artifacts get", "checkpoints ls", "checkpoints get"}
	jobIDsArgs = []string{"metrics", "compare"} // ID [ID...]: every argument
	poolArg    = []string{"pool show", "pool update"}
	projectArg = []string{"project set", "budget set", "budget rm"}
	// quota set|rm PROJECT POOL
	projectPoolArgs = []string{"quota set", "quota rm"}
	poolFlag        = []string{"ls", "queue", "quota ls", "quota request", "quota requests"}
	projectFlag     = []string{"ls", "quota ls", "budget ls", "cost", "quota request", "quota requests", "checkpoints du", "secret ls", "secret set", "secret rm", "template ls", "template show", "template create", "submit"}
	stateFlag       = []string{"ls"}
)

// addCompletions sets the dynamic completions of root's commands: job ids,
// pools and projects from the server, job states. The -o values are set
// where the flag is registered (outputFlag).
func (a *app) addCompletions(root *cobra.Command) {
	find := func(path string) *cobra.Command {
		c, rest, err := root.Find(strings.Fields(path))
		if err != nil || len(rest) > 0 || c == root {
			panic("completion for a command that does not exist: " + path)
		}
		return c
	}
	flag := func(path, name string, fn cobra.CompletionFunc) {
		if err := find(path).RegisterFlagCompletionFunc(name, fn); err != nil {
			panic(fmt.Sprintf("completion of %s --%s: %v", path, name, err))
		}
	}
	for _, p := range jobIDArg {
		find(p).ValidArgsFunction = positional(0, a.completeJobs)
	}
	for _, p := range jobIDsArgs {
		find(p).ValidArgsFunction = a.completeJobs
	}
	for _, p := range poolArg {
		find(p).ValidArgsFunction = positional(0, a.completePools)
	}
	for _, p := range projectArg {
		find(p).ValidArgsFunction = positional(0, a.completeProjects)
	}
	for _, p := range projectPoolArgs {
		find(p).ValidArgsFunction = func(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
			switch len(args) {
			case 0:
				return a.completeProjects(cmd, args, prefix)
			case 1:
				return a.completePools(cmd, args, prefix)
			}
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
	}
	for _, p := range poolFlag {
		flag(p, "pool", a.completePools)
	}
	for _, p := range projectFlag {
		flag(p, "project", a.completeProjects)
	}
	for _, p := range stateFlag {
		flag(p, "state", completeStates)
	}
}

// positional completes argument n with fn, and nothing after it.
func positional(n int, fn cobra.CompletionFunc) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) != n {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return fn(cmd, args, prefix)
	}
}

// completionClient is the client and a bounded context for one completion;
// nil when no client can be built (no completions then, not an error).
func (a *app) completionClient(cmd *cobra.Command) (*client.Client, context.Context, context.CancelFunc) {
	c, err := a.probeClient()
	if err != nil {
		return nil, nil, nil
	}
	parent := cmd.Context()
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithTimeout(parent, completionTimeout)
	return c, ctx, cancel
}

// completeJobs offers the newest jobs' ids, newest first, each described
// by its state and name; ids among args (already given) are left out.
func (a *app) completeJobs(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
	const dir = cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveKeepOrder
	c, ctx, cancel := a.completionClient(cmd)
	if c == nil {
		return nil, dir
	}
	defer cancel()
	list, err := c.ListJobs(ctx, client.ListOptions{Limit: completionJobs})
	if err != nil {
		return nil, dir
	}
	var out []cobra.Completion
	for _, j := range list.Jobs {
		id := strconv.FormatInt(j.ID, 10)
		if strings.HasPrefix(id, strings.TrimPrefix(prefix, "#")) && !slices.Contains(args, id) {
			out = append(out, cobra.CompletionWithDesc(id, oneLine(j.State+" "+j.Name)))
		}
	}
	return out, dir
}

// completePools offers the server's pool names.
func (a *app) completePools(cmd *cobra.Command, _ []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
	c, ctx, cancel := a.completionClient(cmd)
	if c == nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	defer cancel()
	pools, err := c.ListPools(ctx)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	for _, p := range pools {
		if strings.HasPrefix(p.Name, prefix) {
			out = append(out, cobra.CompletionWithDesc(p.Name, fmt.Sprintf("%d GPUs, %d node(s)", p.Capacity.GPUs, len(p.Nodes))))
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completeProjects offers the server's project names.
func (a *app) completeProjects(cmd *cobra.Command, _ []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
	c, ctx, cancel := a.completionClient(cmd)
	if c == nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	defer cancel()
	projects, err := c.ListProjects(ctx)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	for _, p := range projects {
		if strings.HasPrefix(p.Name, prefix) {
			out = append(out, cobra.Completion(p.Name))
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completeFrom offers the fixed values that start with what was typed.
func completeFrom(values []string) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
		var out []cobra.Completion
		for _, v := range values {
			if strings.HasPrefix(v, prefix) {
				out = append(out, cobra.Completion(v))
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeStates offers the job states.
func completeStates(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
	var states []string
	for _, s := range domain.JobStates() {
		states = append(states, string(s))
	}
	return completeFrom(states)(cmd, args, prefix)
}
