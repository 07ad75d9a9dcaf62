package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/client"
)

func (a *app) auditCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "List, verify and export the audit log",
		Long: `The audit log records who changed what (submits, cancels, pools, quotas,
projects, users, roles, tokens, secrets) and every denied attempt. Each
record is chained to the one before it by SHA-256, so editing, deleting,
inserting or reordering records is detected by 'trainyard audit verify'.
Reading it needs the admin or auditor role. See docs/audit.md.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.auditLsCmd(), a.auditVerifyCmd(), a.auditWitnessCmd(), a.auditExportCmd())
	return cmd
}

// parseSince reads --since: a duration back from now ("90m", "1h", "2d") or
// an RFC 3339 time.
func parseSince(now time.Time, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if days, ok := strings.CutSuffix(v, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n >= 0 {
			return now.Add(-time.Duration(n) * 24 * time.Hour), nil
		}
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, usageErrorf("invalid --since %q: give how long ago (30m, 1h, 2d) or a time such as 2025-06-01T12:00:00Z", v)
}

// actorArg turns a bare user name into the actor form records use.
func actorArg(v string) string {
	if v != "" && !strings.Contains(v, ":") {
		return "user:" + v
	}
	return v
}

func (a *app) auditLsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List audit records, oldest first",
		Long: `List audit records in log order as a table: SEQ, TIME, ACTOR, ACTION,
TARGET, RESULT and DETAIL. Filters combine. --actor takes "user:alice" or
just "alice"; --target takes an exact target ("job/42") or a prefix ending
in "/" ("job/"). When more records match, the command says how to get the
next page (--after). -o json prints the API's answer.`,
		Example: `  trainyard audit ls --since 1h
  trainyard audit ls --actor alice --action quota.write
  trainyard audit ls --target job/ --limit 20 -o json`,
		Args: exactArgs(0),
	}
	var (
		opts  client.AuditOptions
		since string
	)
	cmd.Flags().StringVar(&opts.Actor, "actor", "", `only records by this actor ("alice" or "user:alice")`)
	cmd.Flags().StringVar(&opts.Action, "action", "", "only records of this action (job.submit, quota.write, ...)")
	cmd.Flags().StringVar(&opts.Target, "target", "", `only records about this target ("job/42", or a prefix such as "job/")`)
	cmd.Flags().StringVar(&since, "since", "", "only records from this long ago (1h, 2d) or since this RFC 3339 time")
	cmd.Flags().Int64Var(&opts.After, "after", 0, "only records after this sequence number (the next page)")
	cmd.Flags().IntVar(&opts.Limit, "limit", 50, "at most this many records (1-1000)")
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(); err != nil {
			return err
		}
		if opts.Limit < 1 || opts.Limit > 1000 {
			return usageErrorf("invalid --limit %d: want 1 to 1000", opts.Limit)
		}
		if opts.After < 0 {
			return usageErrorf("invalid --after %d: want a sequence number, 0 or more", opts.After)
		}
		var err error
		if opts.Since, err = parseSince(a.env.now(), since); err != nil {
			return err
		}
		opts.Actor = actorArg(opts.Actor)
		c, err := a.client()
		if err != nil {
			return err
		}
		list, err := c.ListAudit(cmd.Context(), opts)
		if err != nil {
			return err
		}
		if list.Records == nil {
			list.Records = []apitypes.AuditRecord{}
		}
		out := cmd.OutOrStdout()
		if ok, err := writeStructured(out, *output, list); ok {
			return err
		}
		if len(list.Records) == 0 {
			fmt.Fprintln(cmd.ErrOrStderr(), "no audit records match")
			return nil
		}
		tw := newTable(out)
		fmt.Fprintln(tw, "SEQ\tTIME\tACTOR\tACTION\tTARGET\tRESULT\tDETAIL")
		for _, r := range list.Records {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Seq, r.At.UTC().Format(time.RFC3339), cell(r.Actor),
				cell(r.Action), cell(r.Target), cell(r.Result), cell(r.Detail))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if list.NextAfter > 0 {
			fmt.Fprintf(cmd.ErrOrStderr(), "more records match; next page: trainyard audit ls --after %d (with the same filters)\n", list.NextAfter)
		}
		return nil
	}
	return cmd
}

func (a *app) auditVerifyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Check that the audit log was not changed",
		Long: `Walk the whole audit log on the server and check its hash chain, and that
the log still holds what the server's witness saw (its newest record, kept
in a file outside the database: see docs/audit.md). Exits 0 and prints
"audit log intact: N records" when every record is intact; exits 1 naming
the first record that was modified, deleted, inserted or moved, the records
missing from the end of the log, or the records rewritten since the
witness saw them.

--witness FILE also checks against a witness you kept elsewhere (a copy of
the server's witness file, or the output of 'trainyard audit witness'): the
log must still hold what it saw, and the server's witness must not have
moved backwards behind it.`,
		Example: `  trainyard audit verify
  trainyard audit witness > /backup/audit-$(date +%F).witness
  trainyard audit verify --witness /backup/audit-2025-06-01.witness
  trainyard audit verify -o json`,
		Args: exactArgs(0),
	}
	witnessFile := cmd.Flags().String("witness", "", "also check against this witness file, kept elsewhere")
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		var kept []byte
		if *witnessFile != "" {
			var err error
			if kept, err = readWitnessFile(*witnessFile); err != nil {
				return err
			}
		}
		c, err := a.clientChecked(checkOutput)
		if err != nil {
			return err
		}
		var v apitypes.AuditVerification
		if kept != nil {
			v, err = c.VerifyAuditWitness(cmd.Context(), kept)
		} else {
			v, err = c.VerifyAudit(cmd.Context())
		}
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if ok, err := writeStructured(out, *output, v); ok {
			if err != nil {
				return err
			}
			if !v.OK {
				return &exitError{code: ExitFailure}
			}
			return nil
		}
		if v.OK && v.Problem == nil {
			fmt.Fprintf(out, "audit log intact: %d records\n", v.Records)
			if v.LastSeq > 0 {
				fmt.Fprintf(out, "newest record: %d %s\n", v.LastSeq, v.LastHash)
			}
			if w := v.Witness; w != nil {
				fmt.Fprintf(out, "matches the server's witness: record %d, written %s\n", w.Seq, w.WrittenAt.UTC().Format(time.RFC3339))
			} else {
				fmt.Fprintln(out, "the server keeps no audit witness: removing the newest records would go unnoticed (docs/audit.md)")
			}
			if kept != nil {
				fmt.Fprintf(out, "matches the witness in %s\n", *witnessFile)
			}
			return nil
		}
		if p := v.Problem; p != nil && p.Kind == "witness_replaced" {
			return &exitError{code: ExitFailure, err: fmt.Errorf("audit witness replaced: %s; the log's own chain holds %d intact records", p.Message, v.Records)}
		}
		msg := "the chain is broken"
		if v.Problem != nil {
			msg = v.Problem.Message
		}
		return &exitError{code: ExitFailure, err: fmt.Errorf("audit log is not intact: %s; the %d records before it are intact", msg, v.Records)}
	}
	return cmd
}

// readWitnessFile reads a witness file for --witness: it must exist, be
// small and be JSON (the server checks the rest).
func readWitnessFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, usageErrorf("cannot read --witness %s: %v", path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20+1))
	if err != nil {
		return nil, usageErrorf("cannot read --witness %s: %v", path, err)
	}
	if len(b) > 1<<20 || !json.Valid(b) {
		return nil, usageErrorf("--witness %s is not an audit witness file; give a copy of the server's audit_witness file or the output of 'trainyard audit witness'", path)
	}
	return b, nil
}

func (a *app) auditWitnessCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "witness",
		Short: "Print the server's audit witness, to keep elsewhere",
		Long: `Print the server's audit witness: the newest record of the audit log (its
number, hash and time) and the hashes of older checkpoints, as the server
keeps them outside its database. Keep copies somewhere the server's
administrators cannot write (another host, an archive); 'trainyard audit
verify --witness FILE' later shows whether records up to it were removed or
rewritten since, even if the server's own witness was replaced too.`,
		Example: `  trainyard audit witness > /backup/audit-$(date +%F).witness`,
		Args:    exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			b, err := c.AuditWitness(cmd.Context())
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(b)
			return err
		},
	}
	return cmd
}

func (a *app) auditExportCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Write the audit log as JSON lines",
		Long: `Write every audit record to stdout, oldest first, one JSON object per line,
exactly as the server holds it (hashes included), for archiving or for
checking elsewhere. --after N continues an earlier export.`,
		Example: `  trainyard audit export > audit.jsonl
  trainyard audit export --after 5000 >> audit.jsonl`,
		Args: exactArgs(0),
	}
	after := cmd.Flags().Int64("after", 0, "only records after this sequence number")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if *after < 0 {
			return usageErrorf("invalid --after %d: want a sequence number, 0 or more", *after)
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		return c.ExportAudit(cmd.Context(), *after, func(_ apitypes.AuditRecord, line []byte) error {
			if _, err := out.Write(line); err != nil {
				return fmt.Errorf("write the export: %w", err)
			}
			_, err := out.Write([]byte{'\n'})
			return err
		})
	}
	return cmd
}
