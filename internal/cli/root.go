// Package cli implements the trainyard command line: cobra commands that talk
// to a Trainyard server through internal/client and never open the database
// themselves.
//
// Exit codes are one table for every command (exitcode.go, docs/cli.md).
// Errors are printed to stderr as "error: ...". Data (ids, tables, JSON,
// logs) goes to stdout; notes meant for a person go to stderr.
package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/client"
	"trainyard/internal/domain"
	"trainyard/internal/jobspec"
)

// BuildInfo identifies the binary.
type BuildInfo struct {
	Version string // e.g. "0.3.1" or "dev"
	Commit  string // VCS revision, may be empty
}

// env is what the commands read from the outside world. Tests replace it.
type env struct {
	getenv       func(string) string
	isTerminal   func(w io.Writer) bool
	now          func() time.Time
	pollInterval time.Duration
	httpClient   *http.Client
	retryFor     time.Duration // how long to retry an idempotent call (retry.go); 0: never
	loadSpec     func(doc []byte, sets []string) (domain.Spec, error)
	schema       func() []byte
}

func defaultEnv() *env {
	return &env{
		getenv:       os.Getenv,
		isTerminal:   isTerminal,
		now:          time.Now,
		pollInterval: time.Second,
		httpClient:   http.DefaultClient,
		retryFor:     client.DefaultRetryFor,
		loadSpec:     jobspec.Load,
		schema:       jobspec.Schema,
	}
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// app holds the state shared by every command of one root.
type app struct {
	info  BuildInfo
	env   *env
	root  *cobra.Command // for the stderr of notes printed while a call runs
	flags struct {
		server string
		token  string
		caFile string
	}
}

// NewRoot returns the trainyard root command with every client command.
// extra commands (the server, the executor's shim) are added as they are.
// Run it with Execute to get the documented exit codes and error format.
func NewRoot(info BuildInfo, extra ...*cobra.Command) *cobra.Command {
	return newRoot(info, defaultEnv(), extra...)
}

func newRoot(info BuildInfo, e *env, extra ...*cobra.Command) *cobra.Command {
	a := &app{info: info, env: e}
	root := &cobra.Command{
		Use:   "trainyard",
		Short: "Launch and manage AI training jobs",
		Long: `trainyard submits training jobs to a Trainyard server and shows what they are doing.

The server URL and token come from --server/--token, else TRAINYARD_SERVER and
TRAINYARD_TOKEN, else the config file ($XDG_CONFIG_HOME/trainyard/config.yaml,
by default ~/.config/trainyard/config.yaml). Without any, the server is
http://127.0.0.1:7070.`,
		Example: `  trainyard submit train.yaml --set params.lr=0.2
  trainyard ls --state running
  trainyard logs -f 12
  trainyard why 12`,
		SilenceErrors:              true,
		SilenceUsage:               true,
		SuggestionsMinimumDistance: 2,
		// Unknown subcommands arrive here as args; report them as usage errors.
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				hint := "run 'trainyard --help' for the list"
				if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
					hint = "did you mean " + strings.Join(s, " or ") + "?"
				}
				return usageErrorf("unknown command %q for %q; %s", args[0], cmd.CommandPath(), hint)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	a.root = root
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usageErrorf("%v; see '%s --help'", err, cmd.CommandPath())
	})
	root.PersistentFlags().StringVar(&a.flags.server, "server", "", "server URL (env TRAINYARD_SERVER; default http://127.0.0.1:7070)")
	root.PersistentFlags().StringVar(&a.flags.token, "token", "", "API token (env TRAINYARD_TOKEN)")
	root.PersistentFlags().StringVar(&a.flags.caFile, "ca-file", "", "PEM file of CA certificates to trust for an https server (env TRAINYARD_CA_FILE)")

	root.AddCommand(
		a.submitCmd(),
		a.rerunCmd(), // rerun.go
		a.lsCmd(),
		a.showCmd(),
		a.logsCmd(),
		a.cancelCmd(),
		a.holdCmd(),    // hold.go
		a.releaseCmd(), // hold.go
		a.whyCmd(),
		a.metricsCmd(),     // training.go
		a.compareCmd(),     // compare.go
		a.sweepCmd(),       // sweeps.go
		a.priorityCmd(),    // priority.go
		a.queueCmd(),       // pools.go
		a.poolCmd(),        // pools.go
		a.quotaCmd(),       // pools.go
		a.projectCmd(),     // pools.go
		a.secretCmd(),      // secrets.go
		a.userCmd(),        // identity.go
		a.roleCmd(),        // identity.go
		a.tokenCmd(),       // identity.go
		a.loginCmd(),       // identity.go
		a.whoamiCmd(),      // identity.go
		a.uiCmd(),          // ui.go
		a.auditCmd(),       // audit.go
		a.costCmd(),        // cost.go
		a.reportCmd(),      // report.go
		a.budgetCmd(),      // budgets.go
		a.alertsCmd(),      // alerts.go
		a.notifyCmd(),      // notify.go
		a.artifactsCmd(),   // artifacts.go
		a.checkpointsCmd(), // artifacts.go
		a.gcCmd(),          // artifacts.go
		// job templates: templates.go
		a.templateCmd(),
		// software environments: envs.go
		a.envCmd(),
		a.statusCmd(), // status.go
		a.versionCmd(),
		a.specCmd(),
		a.docsCmd(),
		a.simCmd(),
	)
	a.addCompletions(root) // completion.go
	root.AddCommand(extra...)
	// cobra adds the "completion" command when the root executes (it binds
	// the output writer then, so it must not be added earlier).
	return root
}

// Execute runs root with the process arguments and returns the exit code.
// Errors are printed to root's stderr as "error: ...". SIGINT and SIGTERM
// cancel the commands' context, so following logs or waiting stops cleanly; a
// second signal kills the process as usual.
func Execute(root *cobra.Command) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // restore the default handling for a second signal
	}()
	return ExecuteContext(ctx, root)
}

// ExecuteContext is Execute with a caller-supplied context and no signal
// handling.
func ExecuteContext(ctx context.Context, root *cobra.Command) int {
	err := root.ExecuteContext(ctx)
	if err != nil {
		PrintError(root.ErrOrStderr(), err)
	}
	return ExitCode(err)
}

// PrintError writes err to w as "error: ..." (nothing for errors that were
// already reported, such as a job that failed under --wait, or an interrupt).
// Messages quote what was sent or stored, so what could drive the terminal
// is escaped (see text).
func PrintError(w io.Writer, err error) {
	var ee *exitError
	if errors.As(err, &ee) && ee.err == nil {
		return
	}
	if errors.Is(err, context.Canceled) {
		return
	}
	var fe domain.FieldErrors
	if errors.As(err, &fe) {
		fmt.Fprintf(w, "error: the job spec is invalid (%d problem(s)):\n", len(fe))
		for _, f := range fe {
			fmt.Fprintf(w, "  %s\n", text(client.FormatFieldError(fieldErrorToAPI(f))))
		}
		return
	}
	fmt.Fprintf(w, "error: %s\n", text(strings.TrimRight(err.Error(), "\n")))
}

// exitError carries an exit code; a nil err means the message was already
// printed.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return "exit status " + strconv.Itoa(e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// usageErrorf returns an error that exits with ExitUsage.
func usageErrorf(format string, args ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, args...)}
}

// exactArgs is cobra.ExactArgs with a usage exit code and the usage line.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErrorf("%s takes %d argument(s), got %d; usage: %s", cmd.CommandPath(), n, len(args), cmd.UseLine())
		}
		return nil
	}
}

// parseID parses a job id argument.
func parseID(s string) (int64, error) {
	id, err := strconv.ParseInt(strings.TrimPrefix(s, "#"), 10, 64)
	if err != nil || id <= 0 {
		return 0, usageErrorf("invalid job id %q: want a positive integer such as 12", s)
	}
	return id, nil
}

// clientChecked validates the command's -o flag, then builds the client:
// the common start of every command that talks to the server.
func (a *app) clientChecked(checkOutput func() error) (*client.Client, error) {
	if err := checkOutput(); err != nil {
		return nil, err
	}
	return a.client()
}

// client builds an API client from the resolved configuration.
func (a *app) client() (*client.Client, error) {
	cfg, err := a.resolveConfig()
	if err != nil {
		return nil, err
	}
	ua := "trainyard/" + a.info.Version
	if a.info.Version == "" {
		ua = "trainyard/dev"
	}
	hc := a.env.httpClient
	if cfg.CAFile != "" {
		if hc, err = httpClientWithCA(cfg.CAFile); err != nil {
			return nil, err
		}
	}
	retry, err := a.retryOption() // retry.go
	if err != nil {
		return nil, err
	}
	return client.New(cfg.Server, cfg.Token, client.WithHTTPClient(hc), client.WithUserAgent(ua), retry), nil
}

// httpClientWithCA trusts the CA certificates in a PEM file (in addition to
// none of the system's: a private server is named by its own CA).
func httpClientWithCA(path string) (*http.Client, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read CA file: %w; check --ca-file or %s", err, EnvCAFile)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, usageErrorf("CA file %s holds no PEM certificate; give the server's CA certificate (or its self-signed certificate)", path)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return &http.Client{Transport: tr}, nil
}

func fieldErrorToAPI(f domain.FieldError) apitypes.FieldError {
	return apitypes.FieldError{Path: f.Path, Message: f.Message, Line: f.Line}
}
