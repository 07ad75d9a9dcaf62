package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/client"
	"trainyard/internal/domain"
)

func (a *app) lsCmd() *cobra.Command {
	var (
		states  []string
		project string
		user    string
		pool    string
		name    string
		limit   int
		all     bool
		sweep   int64
	)
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List jobs, newest first",
		Long: `List jobs, newest first, as a table: ID, NAME, PROJECT, STATE, REASON,
ATTEMPTS and AGE (time since submission). -o wide adds POOL, RESOURCES,
SUBMITTER, STARTED (time since start), DURATION and COST (what the job's
attempts cost so far, each at the rates in force while it ran; "-" in a
pool that never had rates); -o json prints the API's job list.

The filters combine: --user and --pool match exactly, --name keeps the
jobs whose name contains the text (ASCII letters in either case), --sweep
keeps the members of one sweep or job array.

Without --all one page is shown (--limit jobs, else the server's page size);
--all fetches every page.`,
		Example: `  trainyard ls
  trainyard ls --state queued --state running --project vision
  trainyard ls --user alice --pool gpu --name resnet
  trainyard ls --sweep 4 --state running
  trainyard ls --all -o json`,
		Args: exactArgs(0),
	}
	cmd.Flags().StringSliceVar(&states, "state", nil, "only jobs in this state (repeatable or comma-separated): "+stateNames())
	cmd.Flags().StringVar(&project, "project", "", "only jobs of this project")
	cmd.Flags().StringVar(&user, "user", "", "only jobs this user submitted")
	cmd.Flags().StringVar(&pool, "pool", "", "only jobs of this pool")
	cmd.Flags().StringVar(&name, "name", "", "only jobs whose name contains this text, in either case")
	cmd.Flags().IntVar(&limit, "limit", 0, "jobs per page (default: the server's)")
	cmd.Flags().BoolVar(&all, "all", false, "fetch every page, not just the first")
	cmd.Flags().Int64Var(&sweep, "sweep", 0, "only the members of this sweep or job array")
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(); err != nil {
			return err
		}
		if sweep < 0 {
			return usageErrorf("invalid --sweep %d: want a sweep id (see: trainyard sweep ls)", sweep)
		}
		for _, s := range states {
			if !domain.JobState(s).Valid() {
				return usageErrorf("invalid --state %q: want one of %s", s, stateNames())
			}
		}
		if limit < 0 {
			return usageErrorf("invalid --limit %d: want a positive number", limit)
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		opts := client.ListOptions{States: states, Project: project, User: user, Pool: pool, Name: name, Limit: limit, Sweep: sweep}
		list, err := c.ListJobs(cmd.Context(), opts)
		if err != nil {
			return err
		}
		seen := map[string]bool{}
		for all && list.NextCursor != "" {
			if seen[list.NextCursor] {
				return fmt.Errorf("the server returned cursor %q twice; stopped paging to avoid a loop", list.NextCursor)
			}
			seen[list.NextCursor] = true
			opts.Cursor = list.NextCursor
			page, err := c.ListJobs(cmd.Context(), opts)
			if err != nil {
				return err
			}
			list.Jobs = append(list.Jobs, page.Jobs...)
			list.NextCursor = page.NextCursor
		}
		if list.Jobs == nil {
			list.Jobs = []apitypes.Job{}
		}

		out := cmd.OutOrStdout()
		if ok, err := writeStructured(out, *output, list); ok {
			return err
		}
		if len(list.Jobs) == 0 {
			fmt.Fprintln(cmd.ErrOrStderr(), "no jobs found")
			return nil
		}
		a.jobTable(out, list.Jobs, *output == formatWide)
		if list.NextCursor != "" && a.env.isTerminal(cmd.ErrOrStderr()) {
			fmt.Fprintln(cmd.ErrOrStderr(), "more jobs exist: use --all or a larger --limit")
		}
		return nil
	}
	return cmd
}

func stateNames() string {
	var names []string
	for _, s := range domain.JobStates() {
		names = append(names, string(s))
	}
	return strings.Join(names, ", ")
}

// jobTable writes jobs as an aligned table.
func (a *app) jobTable(w io.Writer, jobs []apitypes.Job, wide bool) {
	p := a.useColor(w)
	now := a.env.now()
	tw := newTable(w)
	header := []string{"ID", "NAME", "PROJECT", p.header("STATE"), "REASON", "ATTEMPTS", "AGE"}
	if wide {
		header = append(header, "POOL", "RESOURCES", "SUBMITTER", "STARTED", "DURATION", "COST")
	}
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, j := range jobs {
		row := []string{
			strconv.FormatInt(j.ID, 10), cell(j.Name), cell(j.Project), p.state(cell(j.State)),
			cell(j.Reason), strconv.Itoa(j.AttemptCount), age(now, j.SubmittedAt),
		}
		if wide {
			started := "-"
			if j.StartedAt != nil {
				started = age(now, *j.StartedAt)
			}
			row = append(row, cell(j.Pool), resources(j.Resources), cell(j.Submitter), started,
				jobDuration(now, j), jobCost(j))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
}

// jobCost is j's cost so far in reports' form, to the cent ("12.60"), or
// "-" when the server sent none (its pool never had rates).
func jobCost(j apitypes.Job) string {
	if j.Cost == "" {
		return "-"
	}
	return cell(cents(j.Cost))
}

// cell makes s safe for one table cell: never empty, no tabs or newlines,
// and nothing that could drive the terminal (see oneLine).
func cell(s string) string {
	return dash(oneLine(s))
}

// oneLine makes s safe to print within a line: tabs and line breaks become
// spaces, and text escapes what could drive the terminal.
func oneLine(s string) string {
	return text(strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, s))
}

func (a *app) showCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show a job: its state, attempts and state transitions",
		Long: `Show a job: a summary (state with its reason and message, attempts, output
directory, spec hash, resources), its attempts and its recorded state
transitions. -o json or -o yaml prints the job as the API returns it, spec
included.`,
		Example: `  trainyard show 12
  trainyard show 12 -o json | jq .attempts`,
		Args: exactArgs(1),
	}
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(); err != nil {
			return err
		}
		id, err := parseID(args[0])
		if err != nil {
			return err
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		job, err := c.GetJob(cmd.Context(), id)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if ok, err := writeStructured(out, *output, job); ok {
			return err
		}
		a.showJob(out, job)
		return nil
	}
	return cmd
}

// showJob writes the human view of one job.
func (a *app) showJob(w io.Writer, j apitypes.Job) {
	p := a.useColor(w)
	now := a.env.now()
	tw := newTable(w)
	kv := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }

	state := p.state(cell(j.State))
	if j.Reason != "" {
		state += " (" + oneLine(j.Reason) + ")"
	}
	if j.CancelRequested && !domain.JobState(j.State).Terminal() {
		state += ", cancel requested"
	}
	kv("ID", strconv.FormatInt(j.ID, 10))
	kv("Name", cell(j.Name))
	kv("Project", cell(j.Project))
	kv("Pool", cell(j.Pool))
	kv("State", state)
	if j.Message != "" {
		kv("Message", cell(j.Message))
	}
	kv("Priority", cell(j.Priority))
	kv("Submitter", cell(j.Submitter))
	kv("Submitted", timestamp(&j.SubmittedAt)+" ("+age(now, j.SubmittedAt)+" ago)")
	kv("Started", timestamp(j.StartedAt))
	kv("Finished", timestamp(j.FinishedAt))
	kv("Duration", jobDuration(now, j))
	kv("Attempts", strconv.Itoa(j.AttemptCount))
	if j.Preemptions > 0 {
		kv("Preemptions", strconv.Itoa(j.Preemptions))
	}
	kv("Resources", resources(j.Resources))
	if j.Cost != "" {
		c := cents(j.Cost) + " " + j.Currency
		if j.CostPerHour != "" && j.CostPerHour != "0.00" {
			c += " so far, " + cents(j.CostPerHour) + " " + j.Currency + " an hour while it runs"
		}
		kv("Cost", c)
	}
	if z := j.Sizing; z != nil {
		kv("Used", sizingLine(*z, j.Currency))
	}
	kv("Output dir", cell(j.OutputDir))
	kv("Spec hash", cell(j.SpecHash))
	if j.RerunOf != 0 {
		kv("Rerun of", strconv.FormatInt(j.RerunOf, 10))
	}
	if j.Code != nil {
		kv("Code", codeLine(j.Code)) // code.go
	}
	tw.Flush()

	fmt.Fprintln(w)
	fmt.Fprintln(w, "Attempts:")
	if len(j.Attempts) == 0 {
		fmt.Fprintln(w, "  none yet")
	} else {
		tw = newTable(w)
		fmt.Fprintf(tw, "  N\t%s\tEXIT\tREASON\tSTARTED\tDURATION\tCPU\tPEAK MEM\n", p.header("STATE"))
		for _, at := range j.Attempts {
			exit := "-"
			if at.ExitCode != nil {
				exit = strconv.Itoa(*at.ExitCode)
			}
			cpu, mem := "-", "-"
			if at.Usage != nil {
				cpu = strconv.FormatFloat(at.Usage.CPUSeconds, 'f', 1, 64) + "s"
				mem = humanBytes(at.Usage.MaxRSSBytes)
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", at.Number, p.state(cell(at.State)), exit,
				cell(at.Reason), timestamp(at.StartedAt), runDuration(now, at.StartedAt, at.FinishedAt), cpu, mem)
		}
		tw.Flush()
	}

	fmt.Fprintln(w)
	fmt.Fprintln(w, "Transitions:")
	if len(j.Transitions) == 0 {
		fmt.Fprintln(w, "  none")
		return
	}
	tw = newTable(w)
	fmt.Fprintln(tw, "  TIME\tFROM → TO\tACTOR\tREASON\tMESSAGE")
	for _, t := range j.Transitions {
		from := oneLine(t.From)
		if from == "" {
			from = "(new)"
		}
		at := t.At
		fmt.Fprintf(tw, "  %s\t%s → %s\t%s\t%s\t%s\n", timestamp(&at), from, cell(t.To), cell(t.Actor), cell(t.Reason), cell(t.Message))
	}
	tw.Flush()
}

func (a *app) logsCmd() *cobra.Command {
	var opts client.LogOptions
	cmd := &cobra.Command{
		Use:   "logs ID",
		Short: "Print the logs of a job's attempt",
		Long: `Print the log of one attempt of a job (by default the latest) to stdout.
With -f the log is streamed until the attempt ends. --timestamps prefixes every
line with its time and stream (stdout, stderr, or system for the platform's own
notes). --grep and --since filter on the server; --tail then takes the last
lines of what is left.`,
		Example: `  trainyard logs 12
  trainyard logs -f 12
  trainyard logs 12 --attempt 1 --tail 50 --timestamps
  trainyard logs 12 --grep 'Error|Traceback' --since 10m
  trainyard logs 12 --since 2025-06-01T12:00:00Z --tail 20`,
		Args: exactArgs(1),
	}
	cmd.Flags().IntVar(&opts.Attempt, "attempt", 0, "attempt number (default: the latest)")
	cmd.Flags().BoolVarP(&opts.Follow, "follow", "f", false, "keep streaming until the attempt ends")
	cmd.Flags().IntVar(&opts.Tail, "tail", 0, "only the last N lines")
	cmd.Flags().BoolVar(&opts.Timestamps, "timestamps", false, "prefix each line with its time and stream")
	cmd.Flags().StringVar(&opts.Grep, "grep", "", "only lines matching this regular expression (RE2 syntax)")
	cmd.Flags().StringVar(&opts.Since, "since", "", "only lines written since a duration ago (10m, 2h, 1d) or an RFC 3339 time")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id, err := parseID(args[0])
		if err != nil {
			return err
		}
		if opts.Attempt < 0 || opts.Tail < 0 {
			return usageErrorf("--attempt and --tail must not be negative")
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		rc, err := c.Logs(cmd.Context(), id, opts)
		if client.IsNotFound(err) && opts.Attempt == 0 {
			if note := a.noLogsNote(cmd.Context(), c, id); note != "" {
				fmt.Fprintln(cmd.ErrOrStderr(), note)
				return nil
			}
		}
		if err != nil && opts.Follow {
			return detached(cmd.ErrOrStderr(), err, id)
		}
		if err != nil {
			return err
		}
		defer rc.Close()
		if _, err := io.Copy(cmd.OutOrStdout(), rc); err != nil {
			if cmd.Context().Err() != nil && opts.Follow {
				return detached(cmd.ErrOrStderr(), cmd.Context().Err(), id)
			}
			if cmd.Context().Err() != nil {
				return cmd.Context().Err()
			}
			return fmt.Errorf("log stream of job %d broke off: %w", id, err)
		}
		return nil
	}
	return cmd
}

// noLogsNote explains why a job has no log at all: it has not started
// yet, or it ended without ever starting. "" when it has attempts (their
// log is missing for another reason, which the server's error says).
func (a *app) noLogsNote(ctx context.Context, c *client.Client, id int64) string {
	job, err := c.GetJob(ctx, id)
	if err != nil || job.AttemptCount > 0 {
		return ""
	}
	state := oneLine(job.State)
	if domain.JobState(job.State).Terminal() {
		return fmt.Sprintf("job %d has no logs: it ended (%s) without ever starting (trainyard why %d)", id, state, id)
	}
	return fmt.Sprintf("job %d has no logs yet: it is %s (trainyard why %d; trainyard logs -f %d waits for them)", id, state, id, id)
}

// detached is the error of an interrupt (Ctrl-C) while following or
// waiting on job id. Stopping the CLI does not stop the job, so it says so
// on w first.
func detached(w io.Writer, err error, id int64) error {
	if errors.Is(err, context.Canceled) {
		fmt.Fprintf(w, "stopped following; job %d keeps running — trainyard cancel %d to stop it\n", id, id)
	}
	return err
}

func (a *app) cancelCmd() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a job",
		Long: `Cancel a job. A queued or held job is canceled at once; a running one is
asked to stop and is stopped within its grace period.`,
		Example: `  trainyard cancel 12 --reason "wrong learning rate"`,
		Args:    exactArgs(1),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the job's history")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id, err := parseID(args[0])
		if err != nil {
			return err
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		job, err := c.Cancel(cmd.Context(), id, reason)
		if err != nil {
			return err
		}
		if job.State == string(domain.JobCanceled) {
			fmt.Fprintf(cmd.OutOrStdout(), "canceled job %d\n", job.ID)
		} else {
			fmt.Fprintf(cmd.OutOrStdout(), "cancel requested for job %d (%s); it will stop within its grace period\n", job.ID, oneLine(job.State))
		}
		return nil
	}
	return cmd
}

func (a *app) whyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "why ID",
		Short: "Explain why a job is pending or why it failed",
		Long: `Explain a job's current state: the reason code, the message, the evidence
behind it (numbers, exit codes, log lines) and what to do next.`,
		Example: `  trainyard why 12`,
		Args:    exactArgs(1),
	}
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(); err != nil {
			return err
		}
		id, err := parseID(args[0])
		if err != nil {
			return err
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		why, err := c.Why(cmd.Context(), id)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if ok, err := writeStructured(out, *output, why); ok {
			return err
		}
		p := a.useColor(out)
		fmt.Fprintf(out, "job %d: %s", why.ID, p.state(cell(why.State)))
		if why.Reason != "" {
			fmt.Fprintf(out, " (%s)", oneLine(why.Reason))
		}
		fmt.Fprintln(out)
		if why.Message != "" {
			fmt.Fprintf(out, "  %s\n", oneLine(why.Message))
		}
		if why.Class != "" {
			fmt.Fprintf(out, "class: %s\n", oneLine(why.Class))
		}
		if len(why.Evidence) > 0 {
			fmt.Fprintln(out, "evidence:")
			for _, e := range why.Evidence {
				fmt.Fprintf(out, "  - %s\n", strings.ReplaceAll(text(e), "\n", "\n    "))
			}
		}
		if why.Hint != "" {
			fmt.Fprintf(out, "hint: %s\n", oneLine(why.Hint))
		}
		return nil
	}
	return cmd
}

// jobDuration is how long a job ran, from its first start to its end (or
// now, while it is starting or running). A job back in the queue after a
// retry or a preemption is not running: "-".
func jobDuration(now time.Time, j apitypes.Job) string {
	if j.State == string(domain.JobQueued) || j.State == string(domain.JobHeld) {
		return "-"
	}
	return runDuration(now, j.StartedAt, j.FinishedAt)
}

// sizingLine says what a job used of what it held: "0.8 of 4 CPUs (20%),
// memory peak 3.8GiB of 4GiB (95%)", and what that tells.
func sizingLine(z apitypes.Sizing, currency string) string {
	s := fmt.Sprintf("%.1f of %g CPUs", z.UsedCPUs, z.CPUs)
	if z.CPUs > 0 {
		s += fmt.Sprintf(" (%.0f%%)", 100*z.UsedCPUs/z.CPUs)
	}
	if z.GPUs > 0 {
		s += fmt.Sprintf(", %.1f of %d GPUs (%.0f%%)", z.UsedGPUs, z.GPUs, 100*z.UsedGPUs/float64(z.GPUs))
	}
	if z.Memory > 0 {
		s += fmt.Sprintf(", memory peak %s of %s (%.0f%%)", domain.ByteSize(z.PeakMemory), domain.ByteSize(z.Memory),
			100*float64(z.PeakMemory)/float64(z.Memory))
	} else if z.PeakMemory > 0 {
		s += fmt.Sprintf(", memory peak %s", domain.ByteSize(z.PeakMemory))
	}
	if z.Oversized {
		s += "; far fewer CPUs than it holds"
		if z.IdleCost != "" {
			s += ", the idle ones cost " + cents(z.IdleCost) + " " + currency
		}
	}
	if z.NearMemory {
		s += "; close to its memory limit"
	}
	return s
}
