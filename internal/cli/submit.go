package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/client"
	"trainyard/internal/domain"
)

func (a *app) submitCmd() *cobra.Command {
	var (
		sets   []string
		key    string
		wait   bool
		follow bool
		dryRun bool
		dup    bool
		// --template: templates.go
		template, project string
		contextDir        string   // --context: code.go
		array             string   // --array: sweeps.go
		after             []string // --after
	)
	cmd := &cobra.Command{
		Use:   "submit FILE | --template NAME[@VERSION]",
		Short: "Submit a job from a spec file or a template",
		Long: `Submit a job from a YAML or JSON spec file ("-" reads standard input).

Prints the new job's id alone on stdout, so scripts can capture it:

    id=$(trainyard submit train.yaml)

--set key=value overrides a field after parsing (params.lr=0.2,
resources.gpus=2, name=..., labels.team=...). A relative workdir in the file is
resolved against the file's directory.

--template submits from a stored job template instead of a file (see
trainyard template): a --set key that the template declares as a variable
sets that variable; other keys override spec fields as above.

--context DIR packages DIR (minus what .gitignore and .trainyardignore
exclude), uploads it unless the server has it already, and runs every
attempt in a fresh copy of it; the job records the git commit and whether the
tree was dirty. See docs/code.md.

--wait polls until the job ends and prints its final state on stderr; --follow
also streams the logs of each attempt to stdout. Both exit 0 when the job
succeeded and 1 otherwise. An invalid spec prints every problem and exits 2.

--dry-run runs every check of a submit (spec, permission, environment,
secrets, paths, admission to the pool) and prints what would be submitted and
where it would wait in the pool's queue; nothing is stored.

A submit of the same spec as a live job of yours, or one you submitted in the
last 10 minutes, is stored with a warning, or refused where the server is set
to refuse repeats (duplicate_submits: refuse); --allow-duplicate submits it
anyway.

--after ID[:CONDITION] makes the job wait for job ID (sweep/ID for a sweep)
to succeed, or with :ended or :failed to end or to fail; it waits held with
reason Dependency and fails with DependencyFailed if the condition can no
longer hold. A spec's after: and inputs: [{from_job: ID}] do the same.

A spec with a sweep: section, or --array 0-31 (Slurm's forms: 1,3,5-9, and
%N for at most N at once), submits a sweep: one member job per combination
of the swept params or per index. The sweep's id is printed alone on stdout;
--wait waits until every member ended. See docs/workflows.md.`,
		Example: `  trainyard submit train.yaml
  trainyard submit train.yaml --set params.lr=0.2 --set resources.gpus=2
  trainyard submit train.yaml --idempotency-key nightly-2026-01-31 --follow
  trainyard submit train.yaml --dry-run
  cat train.yaml | trainyard submit -
  trainyard submit train.yaml --context .
  trainyard submit --template resnet --set profile=prod --set gpus=8
  trainyard submit eval.yaml --after 12
  trainyard submit train.yaml --array 0-31%4`,
		Args: submitArgs(&template),
	}
	cmd.Flags().StringArrayVar(&sets, "set", nil, "override a spec field, key=value (repeatable)")
	cmd.Flags().StringVar(&key, "idempotency-key", "", "a repeated submit with the same key returns the first job (or sweep) instead of creating another")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the job ends; exit 0 only if it succeeded")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "stream the logs of every attempt until the job ends; exit like --wait")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "check the submit and show what it would do; submit nothing")
	cmd.Flags().BoolVar(&dup, "allow-duplicate", false, "submit even if a live or recent job of yours has the same spec")
	cmd.Flags().StringVar(&template, "template", "", "submit from this job template, NAME or NAME@VERSION, instead of a file")
	cmd.Flags().StringVarP(&project, "project", "p", "", "with --template: the template's project (default: the one project that has it)")
	cmd.Flags().StringVar(&contextDir, "context", "", "package this directory as the job's code and run each attempt in a fresh copy (docs/code.md)")
	cmd.Flags().StringVar(&array, "array", "", "submit a job array: one member per index, e.g. 0-31 or 0-31%4 (at most 4 at once)")
	cmd.Flags().StringArrayVar(&after, "after", nil, "wait for job ID (or sweep/ID) to succeed; ID:ended or ID:failed for those (repeatable)")
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(); err != nil {
			return err
		}
		if project != "" && template == "" {
			return usageErrorf("--project is for --template; for a spec file set project: in the file or --set project=%s", project)
		}
		if wait && follow {
			return usageErrorf("--wait and --follow cannot be used together (--follow also waits)")
		}
		if dryRun && (wait || follow) {
			return usageErrorf("--dry-run submits nothing, so there is nothing to --wait for or --follow")
		}
		if err := checkSets(sets); err != nil {
			return err
		}
		if len(after) > 0 {
			sets = append(sets, "after="+strings.Join(after, ","))
		}
		var req apitypes.SubmitRequest
		sweep := array != ""
		if template == "" {
			doc, dir, err := readSpecFile(cmd, args[0])
			if err != nil {
				return err
			}
			sweep = sweep || hasTopKey(doc, "sweep")
			sets = resolveWorkdir(doc, dir, sets)
			specText, err := json.Marshal(string(doc))
			if err != nil {
				return fmt.Errorf("encode spec: %w", err)
			}
			req = apitypes.SubmitRequest{Spec: specText, Set: sets}
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		ctx := cmd.Context()
		if template != "" {
			if req, err = templateSubmitRequest(ctx, c, template, project, sets); err != nil {
				return err
			}
		}
		req.AllowDuplicate = dup
		if sweep {
			switch {
			case template != "":
				return usageErrorf("--array is for a spec file; a template submits one job")
			case dryRun:
				return usageErrorf("--dry-run checks one job; submit the sweep, or check one member with --set and without sweep:")
			case follow:
				return usageErrorf("--follow streams one job's logs; a sweep has many: follow a member with trainyard logs -f ID")
			}
			return a.submitSweep(cmd, c, req, array, contextDir, key, wait, *output)
		}
		if dryRun {
			if contextDir != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "note: --context %s is not packaged or uploaded in a dry run\n", contextDir)
			}
			pv, err := c.PreviewSubmit(ctx, req)
			if err != nil {
				return err
			}
			if structured(*output) {
				_, err := writeStructured(cmd.OutOrStdout(), *output, pv)
				return err
			}
			return writePreview(cmd.OutOrStdout(), pv, a.env.now())
		}
		if req.Code, err = a.uploadContext(ctx, c, cmd.ErrOrStderr(), contextDir, req); err != nil { // --context: code.go
			return err
		}
		job, err := c.Submit(ctx, req, key)
		if err != nil {
			return err
		}

		stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
		for _, w := range job.Warnings {
			fmt.Fprintln(stderr, "warning: "+w)
		}
		if !structured(*output) {
			fmt.Fprintln(stdout, job.ID)
		} else if !wait && !follow {
			if _, err := writeStructured(stdout, *output, job); err != nil {
				return err
			}
		}
		if a.env.isTerminal(stderr) {
			verb := "submitted job"
			if job.Created != nil && !*job.Created {
				verb = "idempotency key matched existing job"
			}
			fmt.Fprintf(stderr, "%s %d (%s) — follow with: trainyard logs -f %d\n", verb, job.ID, oneLine(job.Name), job.ID)
		}
		if !wait && !follow {
			return nil
		}

		jobID := job.ID
		if follow {
			job, err = a.followJob(ctx, c, job.ID, stdout, stderr)
		} else {
			job, err = a.waitJob(ctx, c, job.ID)
		}
		if err != nil {
			return detached(stderr, err, jobID)
		}
		if _, err := writeStructured(stdout, *output, job); err != nil {
			return err
		}
		fmt.Fprintln(stderr, finalLine(job, a.useColor(stderr)))
		if job.State != string(domain.JobSucceeded) {
			return &exitError{code: ExitFailure}
		}
		return nil
	}
	return cmd
}

// writePreview prints a dry-run submit for people.
func writePreview(w io.Writer, pv apitypes.SubmitPreview, now time.Time) error {
	r := pv.Resources
	req := fmt.Sprintf("%s, %s CPUs, %s, %s", countOf(r.GPUs, "GPU"), formatFloat(r.CPUs), r.Memory, countOf(r.Nodes, "node"))
	if pv.Timeout != "" {
		req += "; timeout " + pv.Timeout
	} else {
		req += "; no timeout"
	}
	queue := "not known (no scheduler is running)"
	if q := pv.Queue; q != nil {
		queue = fmt.Sprintf("%s waiting, %d at priority %s or above", countOf(q.Waiting, "job"), q.Ahead, pv.Priority)
		if q.AheadStart != nil {
			queue += fmt.Sprintf("; the last of them expected to start %s (in %s)", q.AheadStart.Local().Format("2006-01-02 15:04"),
				domain.FormatDuration(q.AheadStart.Sub(now).Round(time.Minute)))
		}
	}
	worst := "no bound (no timeout)"
	if pv.WorstCaseCost != "" {
		worst = pv.WorstCaseCost + " " + pv.Currency + " at most (the pool's rates for the whole timeout)"
	}
	if _, err := fmt.Fprintf(w, "dry run: nothing was submitted\n"+
		"job      %s (project %s, priority %s)\n"+
		"pool     %s\n"+
		"request  %s\n"+
		"queue    %s\n"+
		"cost     %s\n", oneLine(pv.Name), pv.Project, pv.Priority, pv.Pool, req, queue, worst); err != nil {
		return err
	}
	if b := pv.Budget; b != nil {
		committed := b.Committed
		if b.CommittedUnbounded {
			committed += " or more"
		}
		line := fmt.Sprintf("%s spent of %s %s for %s (%s committed; %s)", b.Spent, b.Amount, pv.Currency, b.Period, committed, b.Action)
		if !b.Fits {
			line += "\n         would be held (BudgetExceeded): " + oneLine(b.Message)
		}
		if _, err := fmt.Fprintf(w, "budget   %s\n", line); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "spec     %s\n", pv.SpecHash)
	return err
}

// countOf writes n things: "1 GPU", "2 GPUs".
func countOf(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// checkSets rejects overrides that are not key=value.
func checkSets(sets []string) error {
	for _, s := range sets {
		k, _, ok := strings.Cut(s, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return usageErrorf("invalid --set %q: want key=value, e.g. --set params.lr=0.2", s)
		}
	}
	return nil
}

// readSpecFile reads the spec at path ("-": standard input) and returns it
// with the absolute directory that relative paths in it are relative to.
func readSpecFile(cmd *cobra.Command, path string) ([]byte, string, error) {
	if path == "-" {
		doc, err := io.ReadAll(cmd.InOrStdin())
		if err != nil {
			return nil, "", fmt.Errorf("read spec from standard input: %w", err)
		}
		dir, err := os.Getwd()
		if err != nil {
			return nil, "", fmt.Errorf("find the current directory to resolve a relative workdir: %w", err)
		}
		return doc, dir, nil
	}
	doc, err := os.ReadFile(path)
	if err != nil {
		return nil, "", usageErrorf("cannot read spec file: %v", err)
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, "", fmt.Errorf("resolve the directory of %s: %w", path, err)
	}
	return doc, dir, nil
}

// resolveWorkdir appends "workdir=<abs>" to sets when doc has a top-level
// relative workdir and sets does not override workdir already; the path is
// resolved against dir. A document that does not parse is left alone: the
// server reports its errors with line numbers.
func resolveWorkdir(doc []byte, dir string, sets []string) []string {
	for _, s := range sets {
		if k, _, _ := strings.Cut(s, "="); strings.TrimSpace(k) == "workdir" {
			return sets
		}
	}
	var top map[string]any
	if err := yaml.Unmarshal(doc, &top); err != nil {
		return sets
	}
	wd, ok := top["workdir"].(string)
	if !ok || wd == "" || filepath.IsAbs(wd) {
		return sets
	}
	return append(sets, "workdir="+filepath.Join(dir, wd))
}

// waitJob polls a job until it is terminal.
func (a *app) waitJob(ctx context.Context, c *client.Client, id int64) (apitypes.Job, error) {
	for {
		job, err := c.GetJob(ctx, id)
		if err != nil {
			return job, fmt.Errorf("waiting for job %d: %w", id, err)
		}
		if domain.JobState(job.State).Terminal() {
			return job, nil
		}
		if err := a.sleep(ctx); err != nil {
			return job, err
		}
	}
}

// followJob streams the log of each attempt of a job, in order, as the
// attempts appear, and returns the job once it is terminal and every attempt's
// log has been streamed. A header names each attempt on stderr.
func (a *app) followJob(ctx context.Context, c *client.Client, id int64, stdout, stderr io.Writer) (apitypes.Job, error) {
	streamed := 0
	for {
		job, err := c.GetJob(ctx, id)
		if err != nil {
			return job, fmt.Errorf("following job %d: %w", id, err)
		}
		terminal := domain.JobState(job.State).Terminal()
		if job.AttemptCount > streamed {
			n := streamed + 1
			rc, err := c.Logs(ctx, id, client.LogOptions{Attempt: n, Follow: true})
			switch {
			case client.IsNotFound(err) && !terminal:
				// The attempt exists but its log does not yet: try again shortly.
			case client.IsNotFound(err):
				streamed = n // it ended without a log; move on
				continue
			case err != nil:
				return job, fmt.Errorf("logs of job %d attempt %d: %w", id, n, err)
			default:
				fmt.Fprintf(stderr, "==> job %d attempt %d <==\n", id, n)
				_, err = io.Copy(stdout, rc)
				rc.Close()
				if err != nil {
					return job, fmt.Errorf("logs of job %d attempt %d: %w", id, n, err)
				}
				streamed = n
				continue // look for the next attempt at once
			}
		} else if terminal {
			return job, nil
		}
		if err := a.sleep(ctx); err != nil {
			return job, err
		}
	}
}

// sleep waits one poll interval or until ctx ends.
func (a *app) sleep(ctx context.Context) error {
	t := time.NewTimer(a.env.pollInterval)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// finalLine is the one-line outcome of a job: "job 12 (smoke) failed:
// ExitCode — process exited with code 1".
func finalLine(job apitypes.Job, p painter) string {
	s := fmt.Sprintf("job %d (%s) %s", job.ID, oneLine(job.Name), p.state(cell(job.State)))
	if job.Reason != "" {
		s += ": " + oneLine(job.Reason)
	}
	if job.Message != "" {
		s += " — " + oneLine(job.Message)
	}
	return s
}
