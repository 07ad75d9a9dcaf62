// Command trainyard is the Trainyard control plane, its CLI and its attempt
// supervisor in one binary. This is the composition root: the only place that
// names concrete adapters.
package main

import (
	"os"

	"github.com/spf13/cobra"

	"trainyard/internal/agent"
	"trainyard/internal/cli"
	"trainyard/internal/executor/local"
)

// Set at build time with -ldflags "-X main.version=... -X main.commit=...".
var (
	version = "dev"
	commit  = ""
)

func main() {
	// The supervisor path stays free of cobra and the server's wiring: it is
	// exec'd once per attempt, so its start-up cost is paid per job.
	if len(os.Args) > 1 && os.Args[1] == "shim" {
		os.Exit(local.ShimMain(os.Args[2:]))
	}
	// So is the in-job agent (a Kubernetes pod's main process), and
	// everything after "agent" is the job's command, never our flags.
	if len(os.Args) > 1 && os.Args[1] == "agent" {
		os.Exit(agent.Main(os.Args[2:]))
	}
	os.Exit(cli.Execute(rootCommand()))
}

// rootCommand is the whole command tree: the client commands plus the server
// and the (hidden) attempt supervisor and in-job agent.
func rootCommand() *cobra.Command {
	shim := &cobra.Command{Use: "shim", Hidden: true, Short: "Supervise one attempt (internal)",
		DisableFlagParsing: true,
		Run:                func(cmd *cobra.Command, args []string) { os.Exit(local.ShimMain(args)) }}
	agentCmd := &cobra.Command{Use: "agent [--] COMMAND [ARG...]", Hidden: true, Short: "Run a job's command and report it through the API (internal)",
		DisableFlagParsing: true,
		Run:                func(cmd *cobra.Command, args []string) { os.Exit(agent.Main(args)) }}
	return cli.NewRoot(cli.BuildInfo{Version: version, Commit: commit}, serverCommand(), storeCommand(), shim, agentCmd)
}
