package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"regexp"
	"time"

	"trainyard/internal/domain"
)

// The read side of the contract: an attempt's log and a job's outputs.
//
// They are their own interface, Files, embedded in Executor, because
// reading needs none of what running does: an API server replica that
// serves `trainyard logs` and artifact downloads holds a Files (for the
// local executor: the same directories, no shims, no events), and a
// cluster executor serves them from where its jobs leave them (pod logs
// persisted by the agent, object storage) without the server ever seeing
// the job's filesystem. Everything below the job's output location, and
// every attempt file a job could reach, is the job's and so untrusted:
// implementations never follow a link a job planted.

// Log streams, as LogQuery.Stream selects them.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
	// StreamSystem holds the supervisor's own notes: started, exited,
	// signals sent, the log limit.
	StreamSystem = "system"
)

// LogQuery selects and formats the lines of one attempt's log.
//
// The filters combine: Stream, Since and Grep keep lines, then Tail keeps
// the last of those. The marker line that says where a capped log dropped
// bytes (see Launch.LogLimit) is kept whatever Stream and Grep are, so a
// filtered log still says where it lost lines.
type LogQuery struct {
	// Tail, when positive, keeps only the last Tail lines.
	Tail int
	// Since, when not zero, keeps only the lines written at or after it.
	Since time.Time
	// Stream, when not empty, keeps only the lines of that stream
	// (StreamStdout, StreamStderr or StreamSystem).
	Stream string
	// Grep, when set, keeps only the lines whose text (without time and
	// stream) it matches.
	Grep *regexp.Regexp
	// Timestamps writes whole records, "<time> <stream> <text>" (time in
	// RFC 3339 with nanoseconds, UTC), the supervisor's system lines
	// included; without it only the text of the program's own lines
	// (stdout and stderr) is written, one per line.
	Timestamps bool
	// Follow keeps writing lines as they are written until the attempt has
	// ended, then returns once every line is written. The executor knows
	// the end itself (the supervisor's outcome record, the pod's phase),
	// so a follower never asks the store. Following an attempt that has
	// not started yet waits for it.
	Follow bool
	// Flush, when set, is called after each batch of lines is written
	// (for HTTP streaming).
	Flush func()
}

// CheckpointsDir is where a job's checkpoints live, below its outputs
// (TRAINYARD_CHECKPOINT_DIR).
const CheckpointsDir = "checkpoints"

// ErrNotRegular says a path in a job's outputs is not a regular file (a
// symbolic link, a directory, a device…); only regular files are read.
var ErrNotRegular = errors.New("not a regular file")

// ErrNotDir says a path in a job's outputs that must be a directory (one
// above a file being written) is something else: a symbolic link, a
// regular file…; nothing is written through it.
var ErrNotDir = errors.New("not a directory")

// ErrIncomplete says a checkpoint is not complete (see
// domain.CheckpointMarker): it must not be registered or resumed from.
var ErrIncomplete = errors.New("checkpoint not complete")

// Checkpoint is one entry found below a job's CheckpointsDir.
type Checkpoint struct {
	Name string
	// Location is where it is, for records and messages: a path on disk,
	// or a URL; never opened by the caller (use Outputs).
	Location string
	// Complete: the job made it complete, by one of the rules of
	// domain.CheckpointMarker. Why says, when it is not, what would make
	// it one ("no marker: write NAME.complete after the file, or save it
	// with the SDK's save_checkpoint").
	Complete bool
	Why      string
	Size     int64 // of its regular files
	Files    int
	// ModTime is when it was completed (its marker's or trainer state's
	// time), or last changed.
	ModTime time.Time
	// SHA256 is its digest (Outputs.Digest); empty in listings, which do
	// not read the data.
	SHA256 string
}

// Record is c as the store registers it for attempt attempt of job jobID,
// completed at its ModTime.
func (c Checkpoint) Record(jobID int64, attempt int) domain.CheckpointRecord {
	return domain.CheckpointRecord{JobID: jobID, Attempt: attempt, Name: c.Name, Path: c.Location,
		Size: c.Size, Files: c.Files, At: c.ModTime.UTC(), SHA256: c.SHA256}
}

// PickResume returns the first of cands whose checkpoint in o is complete
// and, when the candidate has a SHA256, still has that digest, with its
// digest (Launch.Resume); ok is false when none is. skipped says, for
// each candidate before it, why it was passed over. With o nil (the
// checkpoint directory cannot be read) every candidate is skipped.
func PickResume(ctx context.Context, o Outputs, cands []ResumeFrom) (c Checkpoint, ok bool, skipped []string) {
	for _, r := range cands {
		if o == nil {
			skipped = append(skipped, r.Name+": the checkpoint directory cannot be read")
			continue
		}
		got, err := o.Digest(ctx, r.Name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			skipped = append(skipped, r.Name+": no longer there")
		case err != nil:
			skipped = append(skipped, r.Name+": "+err.Error())
		case r.SHA256 != "" && got.SHA256 != r.SHA256:
			skipped = append(skipped, fmt.Sprintf("%s: its files changed since it was registered (sha256 %s, now %s)", r.Name, shortHex(r.SHA256), shortHex(got.SHA256)))
		default:
			return got, true, skipped
		}
	}
	return Checkpoint{}, false, skipped
}

// Seal records the outputs o as an attempt left them: made read-only
// first when it succeeded, then listed without CheckpointsDir. Agents call
// it when an attempt ends (OutputsSealed); the control loop does for an
// attempt whose agent did not.
func Seal(ctx context.Context, o Outputs, succeeded bool) (SealedOutputs, error) {
	if succeeded {
		if err := o.MakeReadOnly(ctx); err != nil {
			return SealedOutputs{}, fmt.Errorf("make the outputs read-only: %w", err)
		}
	}
	files, err := o.Manifest(ctx, CheckpointsDir)
	if err != nil {
		return SealedOutputs{}, fmt.Errorf("list the outputs: %w", err)
	}
	if files == nil {
		files = []domain.ArtifactFile{}
	}
	return SealedOutputs{Files: files, ReadOnly: succeeded}, nil
}

// shortHex is the first 12 digits of a hex digest.
func shortHex(h string) string { return h[:min(12, len(h))] }

// OutputFile is one regular file of a job's outputs, open for reading.
// The reader is exactly the file's bytes; the caller closes it.
type OutputFile struct {
	io.ReadSeekCloser
	Path    string // slash-separated, relative to the outputs
	Size    int64
	ModTime time.Time
}

// Outputs is one job's output tree (TRAINYARD_OUTPUT_DIR, checkpoints
// below it): a directory on the local executor's disk, a prefix in object
// storage for a cluster. Paths are slash-separated and relative to it;
// one that leaves it ("..", absolute) is an error. Only regular files
// are data: links, devices, fifos and the like are left out of listings
// and refused by Open, and no link is ever followed. A missing path is an
// error matching fs.ErrNotExist.
type Outputs interface {
	// Manifest lists every regular file, by path, with its size and
	// SHA-256, leaving out the trees below skip (relative directories,
	// e.g. CheckpointsDir).
	Manifest(ctx context.Context, skip ...string) ([]domain.ArtifactFile, error)
	// Checkpoints lists the checkpoints in CheckpointsDir, oldest first
	// (by ModTime, then name). Names that are hidden or end in .tmp are
	// being written and are left out. A missing CheckpointsDir holds none.
	Checkpoints(ctx context.Context) ([]Checkpoint, error)
	// Open opens the regular file rel; anything else is an error
	// matching ErrNotRegular.
	Open(ctx context.Context, rel string) (OutputFile, error)
	// Walk calls fn with every regular file at or below rel (a file or a
	// directory), open, in lexical order of path; each is closed when fn
	// returns. An error from fn stops the walk and is returned.
	Walk(ctx context.Context, rel string, fn func(OutputFile) error) error
	// MarkComplete marks the checkpoint name (directly below
	// CheckpointsDir) complete: a directory gets its
	// domain.CheckpointMarker inside, a regular file the marker
	// NAME.complete beside it. A marker already there is kept, and one
	// that is not a regular file is an error.
	MarkComplete(ctx context.Context, name string) error
	// Digest reads the complete checkpoint name and returns it with its
	// Size, Files and SHA256: of a file, the SHA-256 of its bytes; of a
	// directory, the SHA-256 of the lines "<sha256 hex>  <size>  <path>\n"
	// of its regular files in lexical order of their slash-separated
	// paths below it, leaving out its domain.CheckpointMarker. One that is
	// not complete is an error matching ErrIncomplete.
	Digest(ctx context.Context, name string) (Checkpoint, error)
	// MakeReadOnly seals the tree: nothing in it can be changed by the
	// job any more (a succeeded job's outputs are immutable).
	MakeReadOnly(ctx context.Context) error
	// Remove removes rel and everything below it, sealed or not (pruning
	// checkpoints, retention); a missing rel is no error.
	Remove(ctx context.Context, rel string) error
	// Close releases the handle; files opened through it stay open.
	Close() error
}

// Restorer is an Outputs the server can write checkpoints back into: it
// restores one from the object store before an attempt resumes from it.
// An executor whose outputs it cannot write (a cluster's, read through
// object storage) offers none, and such a checkpoint is skipped there.
type Restorer interface {
	// CreateFile creates the regular file rel and the directories above
	// it that are missing, and returns it open for writing. Nothing is
	// followed or replaced: a link or a non-directory on the way, or rel
	// already there, is an error.
	CreateFile(ctx context.Context, rel string) (io.WriteCloser, error)
	// Rename moves from to to; a link at from is moved, not followed.
	// Something already at to is an error matching fs.ErrExist.
	Rename(ctx context.Context, from, to string) error
}

// Writer is an Outputs the server writes files into on the job's behalf:
// those an in-job agent uploads (PUT /api/v1/jobs/{id}/attempts/{n}/outputs/{path})
// from where the server cannot read them (a cluster's containers). It
// writes each to a temporary name beside it (Restorer.CreateFile), then
// moves it into place with Replace.
type Writer interface {
	Restorer
	// Replace moves the regular file from to to, replacing the regular
	// file at to in one step: a reader sees the old file or the new one,
	// never part of either. Nothing is followed: anything but a regular
	// file at to (a link, a directory) is an error matching ErrNotRegular,
	// a link or non-directory among the directories above to one matching
	// ErrNotDir. (CreateFile's errors for a link or non-directory on the
	// way match ErrNotDir too.)
	Replace(ctx context.Context, from, to string) error
}

// OutputsCreator is a Files that can make a job's output tree when it is
// not there yet: for a job whose attempts run where the server cannot see
// (a cluster's pods) nothing else makes it on the server's side before its
// agent uploads the first file.
type OutputsCreator interface {
	// CreateOutputs makes the output tree dir (an absolute path, the
	// job's output location) and the directories above it that are
	// missing, and opens it as Outputs does; one already there is opened.
	CreateOutputs(ctx context.Context, dir string) (Outputs, error)
}

// Files is the read side of an executor: what attempts left, read
// without running any (see the comment at the top of this file).
type Files interface {
	// Logs writes the log of the attempt to w, per q. A log that does not
	// exist (the attempt never started, or the executor does not know it)
	// is an error matching fs.ErrNotExist, unless following. It returns
	// when ctx ends (nil error), or w fails.
	//
	// A writer, not a reader: the copy runs in the caller's goroutine (no
	// pipe and goroutine per follower), a slow w slows it rather than
	// buffering, and the executor can push down Tail, Since and Grep to
	// where the log is (reading backwards, binary search, a literal
	// search). A caller that wants a reader wraps it in an io.Pipe.
	Logs(ctx context.Context, ref Ref, q LogQuery, w io.Writer) error
	// Outputs opens the output tree of a job: dir is its output location,
	// the TRAINYARD_OUTPUT_DIR its attempts were launched with. A tree
	// that does not exist is an error matching fs.ErrNotExist. The caller
	// closes it.
	Outputs(ctx context.Context, dir string) (Outputs, error)
	// LogState says whether the attempt's log reached its limit
	// (Launch.LogLimit) and how much of it was dropped so far. A log that
	// does not exist is not limited.
	LogState(ctx context.Context, ref Ref) (LogState, error)
	// ExpireLogs removes the logs of every attempt of a job (log
	// retention) and remembers when and why, for LogsExpired; false: there
	// were none. The outcome records stay.
	ExpireLogs(ctx context.Context, jobID int64, e LogExpiry) (bool, error)
	// LogsExpired reports whether ExpireLogs removed the job's logs.
	LogsExpired(ctx context.Context, jobID int64) (LogExpiry, bool)
}

// LogState is how much of an attempt's log was kept.
type LogState struct {
	// Limited: the log reached its limit; it keeps its head and a
	// rolling tail from then on.
	Limited bool
	Limit   int64 // the limit, in bytes (0: not known)
	Dropped int64 // bytes dropped between the head and the tail so far
}

// LogExpiry records the removal of a job's logs under log retention.
type LogExpiry struct {
	DeletedAt time.Time
	Retention time.Duration // the retention period that removed them
}
