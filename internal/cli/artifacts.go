package cli

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"trainyard/internal/api/apitypes"
)

func (a *app) artifactsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "artifacts",
		Short: "List and download a job's outputs",
		Long: `When an attempt ends, the server records a manifest of the job's output
directory (every file with its size and SHA-256) and the lineage that made
it: inputs, environment, code package, submitter, times and final state. A
succeeded job's outputs are read-only. Checkpoints are listed separately
(trainyard checkpoints).`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.artifactsLsCmd(), a.artifactsGetCmd())
	return cmd
}

func (a *app) artifactsLsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "ls ID",
		Aliases: []string{"list"},
		Short:   "List a job's output files and their lineage",
		Example: `  trainyard artifacts ls 42
  trainyard artifacts ls 42 --attempt 1 -o json`,
		Args: exactArgs(1),
	}
	attempt := cmd.Flags().Int("attempt", 0, "the manifest recorded when this attempt ended (default: the latest)")
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id, err := parseID(args[0])
		if err != nil {
			return err
		}
		c, err := a.clientChecked(checkOutput)
		if err != nil {
			return err
		}
		m, err := c.Manifest(cmd.Context(), id, *attempt)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if done, err := writeStructured(out, *output, m); done {
			return err
		}
		l := m.Lineage
		fmt.Fprintf(out, "job %d attempt %d (%s), recorded %s\n", m.Job, m.Attempt, text(l.State), m.RecordedAt.UTC().Format(time.RFC3339))
		fmt.Fprintf(out, "lineage: env %s", cell(l.Env))
		if l.EnvDigest != "" {
			fmt.Fprintf(out, " (%s)", cell(shortHash(l.EnvDigest)))
		}
		if l.Code != "" {
			fmt.Fprintf(out, ", code %s", cell(shortHash(l.Code)))
			if l.GitCommit != "" {
				fmt.Fprintf(out, " commit %s", cell(l.GitCommit[:min(12, len(l.GitCommit))]))
			}
			if l.GitDirty {
				fmt.Fprint(out, " (dirty)")
			}
		}
		for _, in := range l.Inputs {
			if in.FromJob > 0 {
				fmt.Fprintf(out, ", input %s from job %d", cell(in.Name), in.FromJob)
				continue
			}
			fmt.Fprintf(out, ", input %s@%s", cell(in.Name), cell(in.Version))
		}
		if l.RerunOf > 0 {
			fmt.Fprintf(out, ", rerun of %d", l.RerunOf)
		}
		if r := l.ResumedFrom; r != nil {
			fmt.Fprintf(out, ", resumed from job %d checkpoint %s", r.Job, cell(r.Checkpoint))
		}
		fmt.Fprintf(out, ", submitted by %s\n", cell(l.Submitter))
		if len(m.Files) == 0 {
			fmt.Fprintln(out, "no output files")
			return nil
		}
		tw := newTable(out)
		fmt.Fprintln(tw, "PATH\tSIZE\tSHA256")
		for _, f := range m.Files {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", cell(f.Path), humanBytes(f.Size), cell(f.SHA256[:min(16, len(f.SHA256))]))
		}
		fmt.Fprintf(tw, "%d file(s)\t%s\t\n", len(m.Files), humanBytes(m.TotalBytes))
		return tw.Flush()
	}
	return cmd
}

// shortHash is "sha256:0123456789ab" of a long digest.
func shortHash(h string) string {
	algo, hex, ok := strings.Cut(h, ":")
	if !ok {
		return h[:min(12, len(h))]
	}
	return algo + ":" + hex[:min(12, len(hex))]
}

func (a *app) artifactsGetCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "get ID [PATH]",
		Short: "Download a job's outputs and verify their checksums",
		Long: `Download every output file of the job's latest manifest (or PATH: one file,
or a directory prefix such as eval/) into --dest, keeping relative paths.
Each file's SHA-256 is checked against the manifest; a mismatch is an error
and the file is kept as NAME.corrupt for inspection. A file already in
--dest with the right checksum is skipped, and a partial one is resumed; one
with other contents is kept, and reported, unless --force. Nothing is
written outside --dest: a path that is absolute or climbs out with "..",
or that leads out through a symbolic link already in --dest, is refused.`,
		Example: `  trainyard artifacts get 42 --dest ./run42
  trainyard artifacts get 42 model.pt`,
		Args: cobra.RangeArgs(1, 2),
	}
	dest := cmd.Flags().String("dest", ".", "directory to download into")
	force := cmd.Flags().Bool("force", false, "overwrite files in --dest whose contents differ from the job's")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id, err := parseID(args[0])
		if err != nil {
			return err
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		ctx := cmd.Context()
		m, err := c.Manifest(ctx, id, 0)
		if err != nil {
			return err
		}
		files := m.Files
		if len(args) == 2 {
			want := strings.TrimPrefix(path.Clean(args[1]), "./")
			files = files[:0:0]
			for _, f := range m.Files {
				if f.Path == want || strings.HasPrefix(f.Path, strings.TrimSuffix(want, "/")+"/") {
					files = append(files, f)
				}
			}
			if len(files) == 0 {
				return fmt.Errorf("job %d's outputs have no file or directory %q; see: trainyard artifacts ls %d", id, args[1], id)
			}
		}
		sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
		d, err := openDest(*dest, *force)
		if err != nil {
			return err
		}
		defer d.Close()
		errOut := cmd.ErrOrStderr()
		var total int64
		var failed []string
		upToDate := 0
		for _, f := range files {
			n, err := a.download(cmd, id, f, d)
			total += n
			switch {
			case errors.Is(err, errUpToDate):
				upToDate++
			case err != nil:
				fmt.Fprintf(errOut, "%s: %s\n", cell(f.Path), text(err.Error()))
				failed = append(failed, f.Path)
			}
		}
		fmt.Fprintln(cmd.OutOrStdout(), downloadSummary(len(files), upToDate, len(failed), total, *dest))
		if len(failed) > 0 {
			return &exitError{code: ExitFailure, err: fmt.Errorf("%d file(s) failed: %s", len(failed), strings.Join(failed, ", "))}
		}
		return nil
	}
	return cmd
}

// errUpToDate is download's answer for a file that --dest already holds
// with the manifest's checksum: nothing was transferred.
var errUpToDate = errors.New("already up to date")

// downloadSummary is the last line of artifacts get: "downloaded 2 of 2
// file(s), 3.0MiB, into out; checksums verified", or, when some files were
// there already, "1 file already up to date, 0 downloaded into out".
func downloadSummary(files, upToDate, failed int, bytes int64, dest string) string {
	downloaded := files - upToDate - failed
	if upToDate == 0 {
		return fmt.Sprintf("downloaded %d of %d file(s), %s, into %s; checksums verified", downloaded, files, humanBytes(bytes), dest)
	}
	s := fmt.Sprintf("%d file(s) already up to date, %d downloaded", upToDate, downloaded)
	if upToDate == 1 {
		s = fmt.Sprintf("1 file already up to date, %d downloaded", downloaded)
	}
	if downloaded > 0 {
		s += " (" + humanBytes(bytes) + ")"
	}
	s += " into " + dest
	if failed > 0 {
		s += fmt.Sprintf(", %d failed", failed)
	}
	return s + "; checksums verified"
}

// download fetches one file into d (resuming a partial copy) and checks
// its SHA-256. It returns the bytes transferred, and errUpToDate when d
// holds the file already.
func (a *app) download(cmd *cobra.Command, id int64, f apitypes.ArtifactFile, d *destDir) (int64, error) {
	target, err := d.place(f.Path)
	if err != nil {
		return 0, err
	}
	if sum, size, err := d.sha256(target); err == nil && size == f.Size && sum == f.SHA256 {
		return 0, errUpToDate
	}
	if err := d.refuseExisting(f.Path, target); err != nil {
		return 0, err
	}
	part := target + ".part"
	var offset int64
	if fi, err := d.root.Stat(part); err == nil && fi.Size() < f.Size {
		offset = fi.Size()
	}
	c, err := a.client()
	if err != nil {
		return 0, err
	}
	body, _, want, err := c.OpenArtifact(cmd.Context(), id, f.Path, offset)
	if err != nil && offset > 0 {
		offset = 0 // start over
		body, _, want, err = c.OpenArtifact(cmd.Context(), id, f.Path, 0)
	}
	if err != nil {
		return 0, err
	}
	defer body.Close()
	if want == "" {
		want = f.SHA256
	}
	flag := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if offset > 0 {
		flag = os.O_WRONLY | os.O_APPEND
	}
	out, err := d.root.OpenFile(part, flag, 0o644)
	if err != nil {
		return 0, d.wrap(f.Path, err)
	}
	var r io.Reader = body
	errOut := cmd.ErrOrStderr()
	var bar *dlBar
	if a.env.isTerminal(errOut) {
		bar = &dlBar{w: errOut, name: f.Path, total: f.Size, done: offset}
		r = io.TeeReader(body, bar)
	}
	n, err := io.Copy(out, r)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if bar != nil {
		bar.finish()
	}
	if err != nil {
		return n, fmt.Errorf("download interrupted after %s (run the command again to resume): %w", humanBytes(offset+n), err)
	}
	sum, size, err := d.sha256(part)
	if err != nil {
		return n, err
	}
	if sum != want || size != f.Size {
		bad := target + ".corrupt"
		_ = d.root.Rename(part, bad)
		return n, fmt.Errorf("corrupt: sha256 %s (%s), the manifest says %s (%s); kept as %s", sum, humanBytes(size), want, humanBytes(f.Size), filepath.Join(d.name, bad))
	}
	// Rename replaces a link at target, never what it points to.
	if err := d.root.Rename(part, target); err != nil {
		return n, d.wrap(f.Path, err)
	}
	return n, nil
}

// dlBar draws "model.pt  52%  5.2 MiB/10.0 MiB" on one terminal line.
type dlBar struct {
	w           io.Writer
	name        string
	total, done int64
	drawn       time.Time
}

func (b *dlBar) Write(p []byte) (int, error) {
	b.done += int64(len(p))
	if now := time.Now(); now.Sub(b.drawn) >= 100*time.Millisecond {
		b.drawn = now
		b.draw()
	}
	return len(p), nil
}

func (b *dlBar) draw() {
	pct := 100.0
	if b.total > 0 {
		pct = min(100, 100*float64(b.done)/float64(b.total))
	}
	fmt.Fprintf(b.w, "\r%s  %3.0f%%  %s/%s ", b.name, pct, humanBytes(b.done), humanBytes(b.total))
}

func (b *dlBar) finish() {
	b.draw()
	fmt.Fprintln(b.w)
}

func (a *app) checkpointsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "checkpoints",
		Short: "List jobs' checkpoints and the space they take",
		Long: `A checkpoint is an entry of $TRAINYARD_CHECKPOINT_DIR the job made complete: a
directory holding a .complete marker (or marked by the API call the SDK's
checkpoint_done makes), a file with NAME.complete beside it (the SDK's
save_checkpoint), a Hugging Face checkpoint-N directory holding
trainer_state.json, or a file that is a whole zip archive (torch.save,
Lightning .ckpt). The job's agent registers each with its SHA-256 when it is
complete; the server keeps the newest checkpoint.keep of them (default 3;
only registered ones are ever removed) and hands the next attempt the newest
whose digest still matches as $TRAINYARD_RESUME_FROM. An attempt that fails
right after resuming sets its checkpoint aside: the next one resumes from
the one before.

With an object store configured, each kept checkpoint is also copied there
and verified; lifecycle policies may then remove its local copy (TIER
object). Resuming and checkpoints get read it from whichever tier holds it.`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.checkpointsLsCmd(), a.checkpointsGetCmd(), a.checkpointsDuCmd())
	return cmd
}

func (a *app) checkpointsLsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "ls ID",
		Aliases: []string{"list"},
		Short:   "List a job's kept checkpoints, oldest first",
		Example: `  trainyard checkpoints ls 42`,
		Args:    exactArgs(1),
	}
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id, err := parseID(args[0])
		if err != nil {
			return err
		}
		c, err := a.clientChecked(checkOutput)
		if err != nil {
			return err
		}
		l, err := c.Checkpoints(cmd.Context(), id)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if done, err := writeStructured(out, *output, l); done {
			return err
		}
		if len(l.Checkpoints) == 0 {
			fmt.Fprintf(cmd.ErrOrStderr(), "job %d has no complete checkpoints\n", id)
			return nil
		}
		tw := newTable(out)
		fmt.Fprintln(tw, "NAME\tATTEMPT\tFILES\tSIZE\tTIER\tCOMPLETED\tSHA256\tPATH\tNOTE")
		for _, ck := range l.Checkpoints {
			note := ""
			switch {
			case ck.SetAside != "":
				note = "set aside: " + ck.SetAside
			case ck.ResumedBy > 0:
				note = fmt.Sprintf("resumed by attempt %d", ck.ResumedBy)
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(ck.Name), ck.Attempt, ck.Files, humanBytes(ck.Size), dash(cell(ck.Tier)),
				ck.At.UTC().Format(time.RFC3339), dash(shortHash(ck.SHA256)), cell(ck.Path), cell(note))
		}
		fmt.Fprintf(tw, "%d checkpoint(s)\t\t\t%s\t\t\t\t\t\n", len(l.Checkpoints), humanBytes(l.TotalBytes))
		return tw.Flush()
	}
	return cmd
}

func (a *app) checkpointsDuCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "du",
		Short:   "Show the space kept checkpoints take, per job and per project",
		Example: `  trainyard checkpoints du --project vision`,
		Args:    exactArgs(0),
	}
	project := cmd.Flags().String("project", "", "only jobs of this project")
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := a.clientChecked(checkOutput)
		if err != nil {
			return err
		}
		u, err := c.CheckpointUsage(cmd.Context(), *project)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if done, err := writeStructured(out, *output, u); done {
			return err
		}
		if len(u.Jobs) == 0 {
			fmt.Fprintln(cmd.ErrOrStderr(), "no kept checkpoints")
			return nil
		}
		tw := newTable(out)
		fmt.Fprintln(tw, "PROJECT\tJOB\tCHECKPOINTS\tSIZE\tLOCAL\tOBJECT")
		tiers := map[string][2]int64{}
		for _, j := range u.Jobs {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\n", cell(j.Project), j.Job, j.Count, humanBytes(j.Bytes), humanBytes(j.LocalBytes), humanBytes(j.ObjectBytes))
			t := tiers[j.Project]
			tiers[j.Project] = [2]int64{t[0] + j.LocalBytes, t[1] + j.ObjectBytes}
		}
		projects := make([]string, 0, len(u.Projects))
		for p := range u.Projects {
			projects = append(projects, p)
		}
		sort.Strings(projects)
		for _, p := range projects {
			fmt.Fprintf(tw, "%s\ttotal\t\t%s\t%s\t%s\n", cell(p), humanBytes(u.Projects[p]), humanBytes(tiers[p][0]), humanBytes(tiers[p][1]))
		}
		return tw.Flush()
	}
	return cmd
}

func (a *app) gcCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Remove what retention lets go; move and delete checkpoints by lifecycle",
		Long: `Remove the checkpoints and report files of finished jobs that are older than
the server's retention policies allow (retention in the server config), and
apply its checkpoint lifecycle policies (checkpoint_lifecycle) to every job:
older checkpoints move to the object store (KIND move), old ones are deleted
from every tier; see docs/artifacts.md. Models and other outputs are never
removed. --dry-run lists exactly what a run made now would do, and changes
nothing. Every step is audited. Needs the admin or resource-admin role.`,
		Example: `  trainyard gc --dry-run
  trainyard gc`,
		Args: exactArgs(0),
	}
	dry := cmd.Flags().Bool("dry-run", false, "list what would be removed; remove nothing")
	output, checkOutput := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := a.clientChecked(checkOutput)
		if err != nil {
			return err
		}
		rep, err := c.GC(cmd.Context(), *dry)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if done, err := writeStructured(out, *output, rep); done {
			return err
		}
		verb := "removed"
		if rep.DryRun {
			verb = "would remove"
		}
		if len(rep.Deletions) > 0 {
			tw := newTable(out)
			fmt.Fprintln(tw, "JOB\tKIND\tPATH\tSIZE\tWHY")
			for _, d := range rep.Deletions {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", d.Job, cell(d.Kind), cell(d.Path), humanBytes(d.Bytes), cell(d.Reason))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
		fmt.Fprintf(out, "%s %d item(s), %s\n", verb, len(rep.Deletions), humanBytes(rep.Bytes))
		for _, f := range rep.Failed {
			fmt.Fprintln(cmd.ErrOrStderr(), "failed:", text(f))
		}
		if len(rep.Failed) > 0 {
			return &exitError{code: ExitFailure, err: fmt.Errorf("%d removal(s) failed", len(rep.Failed))}
		}
		return nil
	}
	return cmd
}

func (a *app) checkpointsGetCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "get ID NAME",
		Short: "Download one kept checkpoint",
		Long: `Download a kept checkpoint (see trainyard checkpoints ls) into --dest/NAME.
Without --force, a file already there is kept and stops the download.
Nothing is written outside --dest: a path that is absolute or climbs out
with "..", or that leads out through a symbolic link already in --dest, is
refused.`,
		Example: `  trainyard checkpoints get 42 step-2000 --dest ./ckpt`,
		Args:    exactArgs(2),
	}
	dest := cmd.Flags().String("dest", ".", "directory to download into")
	force := cmd.Flags().Bool("force", false, "overwrite files already in --dest")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id, err := parseID(args[0])
		if err != nil {
			return err
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		body, err := c.CheckpointArchive(cmd.Context(), id, args[1])
		if err != nil {
			return err
		}
		defer body.Close()
		d, err := openDest(*dest, *force)
		if err != nil {
			return err
		}
		defer d.Close()
		files, size, err := untar(body, d)
		if err != nil {
			return fmt.Errorf("download checkpoint %s of job %d: %w", args[1], id, err)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "downloaded checkpoint %s: %d file(s), %s, into %s\n", args[1], files, humanBytes(size), filepath.Join(*dest, args[1]))
		return nil
	}
	return cmd
}

// untar extracts the regular files of a tar stream into d.
func untar(r io.Reader, d *destDir) (files int, size int64, err error) {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, size, nil
		}
		if err != nil {
			return files, size, err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		rel, err := d.place(h.Name)
		if err != nil {
			return files, size, err
		}
		f, err := d.create(h.Name, rel)
		if err != nil {
			return files, size, err
		}
		n, err := io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return files, size, err
		}
		files++
		size += n
	}
}
