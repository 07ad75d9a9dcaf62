package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
)

func (a *app) rerunCmd() *cobra.Command {
	var (
		env    string
		sets   []string
		key    string
		wait   bool
		follow bool
		resume bool
		from   string
	)
	cmd := &cobra.Command{
		Use:   "rerun ID",
		Short: "Submit a job again from the exact spec another job ran with",
		Long: `Submit a new job from the stored config snapshot of job ID — the exact spec
it ran with, and the code package it ran from — with changes applied. The new
job records the original in its lineage (show prints "Rerun of: ID").

--env replaces the environment (name@version); --set key=value overrides a
field as in submit (params.lr=0.2, resources.gpus=2, ...). The result is
validated and admitted like any submit: an invalid change prints every problem
with its field path, exits 2 and submits nothing. Re-running needs permission
to read job ID and to submit in its project.

A re-run starts from step 0 with a new output directory. --resume starts it
instead from job ID's latest complete checkpoint (a run canceled by mistake
continues where it was), --from-checkpoint NAME from the one named (see
'trainyard checkpoints ls ID'): the checkpoint is copied into the new job's
checkpoint directory and handed to its first attempt as TRAINYARD_RESUME_FROM,
and the new job's spec records it (resume: {job, checkpoint}), which
'trainyard artifacts ls' shows.

Prints the new job's id alone on stdout. --wait and --follow behave as in
submit: exit 0 when the new job succeeded and 1 otherwise.`,
		Example: `  trainyard rerun 12
  trainyard rerun 12 --set params.lr=0.2 --follow
  trainyard rerun 12 --env pytorch-2.5@1 --set resources.gpus=2
  trainyard rerun 12 --resume
  trainyard rerun 12 --from-checkpoint ckpt-000300.json`,
		Args: exactArgs(1),
	}
	cmd.Flags().StringVar(&env, "env", "", "run in this environment, NAME@VERSION, instead of the original's")
	cmd.Flags().StringArrayVar(&sets, "set", nil, "override a spec field, key=value (repeatable)")
	cmd.Flags().StringVar(&key, "idempotency-key", "", "a repeated rerun with the same key returns the first job instead of creating another")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the new job ends; exit 0 only if it succeeded")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "stream the logs of every attempt until the new job ends; exit like --wait")
	cmd.Flags().BoolVar(&resume, "resume", false, "start from the original's latest complete checkpoint instead of from the beginning")
	cmd.Flags().StringVar(&from, "from-checkpoint", "", "start from this checkpoint of the original (see: trainyard checkpoints ls ID)")
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(); err != nil {
			return err
		}
		id, err := parseID(args[0])
		if err != nil {
			return err
		}
		if wait && follow {
			return usageErrorf("--wait and --follow cannot be used together (--follow also waits)")
		}
		if err := checkSets(sets); err != nil {
			return err
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		ctx := cmd.Context()
		job, err := c.Rerun(ctx, id, apitypes.RerunRequest{Env: env, Set: sets, Resume: resume, FromCheckpoint: from}, key)
		if err != nil {
			return err
		}

		stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
		if !structured(*output) {
			fmt.Fprintln(stdout, job.ID)
		} else if !wait && !follow {
			if _, err := writeStructured(stdout, *output, job); err != nil {
				return err
			}
		}
		if a.env.isTerminal(stderr) {
			note := fmt.Sprintf("submitted job %d (rerun of %d)", job.ID, id)
			if job.Created != nil && !*job.Created {
				note = fmt.Sprintf("idempotency key matched existing job %d", job.ID)
			}
			fmt.Fprintf(stderr, "%s — follow with: trainyard logs -f %d\n", note, job.ID)
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
