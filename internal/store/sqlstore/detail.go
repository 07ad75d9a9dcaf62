package sqlstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"trainyard/internal/domain"
	"trainyard/internal/store"
	"trainyard/internal/store/column"
)

// A job's detail is one statement: the UNION ALL of five reads, each row
// tagged with its kind in the first column. The columns after it are slots
// of three types, which every branch fills in the same order and pads with
// typed NULLs (so PostgreSQL resolves each slot's type): detailInts
// integers, detailFloats floats and detailTexts texts. The second column,
// each branch's first integer, orders the rows of a kind. The job's own
// columns come in two rows (detailJob, detailJobMore), so that the slots
// are as few as the widest of the other rows needs: every slot of every
// row costs a call into SQLite's driver, NULL or not.
const (
	detailJob = iota
	detailJobMore
	detailAttempt
	detailEvent
	detailRate

	detailInts   = 9
	detailFloats = 2
	detailTexts  = 7
)

// detailBranch is one branch of qJobDetail: its kind, its columns of each
// type and the rest of its SELECT (FROM, WHERE), which takes the job id
// once.
func detailBranch(kind int, ints, floats, texts []string, from string) string {
	cols := []string{fmt.Sprint(kind)}
	pad := func(exprs []string, n int, typ string) {
		if len(exprs) > n {
			panic(fmt.Sprintf("sqlstore: a job detail branch has %d %s columns, more than the %d slots", len(exprs), typ, n))
		}
		cols = append(cols, exprs...)
		for range n - len(exprs) {
			cols = append(cols, "CAST(NULL AS "+typ+")")
		}
	}
	pad(ints, detailInts, "BIGINT")
	pad(floats, detailFloats, "DOUBLE PRECISION")
	pad(texts, detailTexts, "TEXT")
	return "SELECT " + strings.Join(cols, ", ") + " " + from
}

// qJobDetail reads a job (as QJobGet, with its code package), its
// attempts (as qAttemptsOfJob), its events (as qEventsOfJob) and its
// pool's rate history (as qRateHistory), by kind and then in each kind's
// order. It takes the job id five times.
var qJobDetail = Q(strings.Join([]string{
	detailBranch(detailJob,
		[]string{"id", "submitted_at", "updated_at", "started_at", "finished_at",
			"attempts", "next_attempt_at", "cancel_requested", "req_gpus"},
		[]string{"req_cpus"},
		[]string{"name", "project", "pool", "state", "reason", "message", "priority"},
		`FROM jobs WHERE id = ?`),
	detailBranch(detailJobMore,
		[]string{"jobs.req_memory", "jobs.req_nodes", "jobs.req_timeout_ns", "jobs.preemptible", "jobs.preempt_requested",
			"jobs.preemptions", "jobs.rerun_of", "job_code.dirty"},
		nil,
		[]string{"jobs.submitter", "jobs.spec_hash", "jobs.output_dir", "jobs.idempotency_key", "snapshots.spec_json",
			"job_code.sha256", "job_code.git_commit"},
		`FROM jobs JOIN snapshots ON snapshots.hash = jobs.spec_hash
		LEFT JOIN job_code ON job_code.job_id = jobs.id WHERE jobs.id = ?`),
	detailBranch(detailAttempt,
		[]string{"number", "exit_code", "created_at", "started_at", "finished_at", "max_rss", "borrowed"},
		[]string{"cpu_seconds", "gpu_seconds"},
		[]string{"state", "reason", "message", "node", "gpus"},
		`FROM attempts WHERE job_id = ?`),
	detailBranch(detailEvent,
		[]string{"id", "attempt", "at"},
		nil,
		[]string{"from_state", "to_state", "actor", "reason", "message"},
		`FROM events WHERE job_id = ?`),
	detailBranch(detailRate,
		[]string{"pool_rates.effective_from"},
		nil,
		[]string{"pool_rates.rates_json"},
		`FROM pool_rates JOIN jobs ON jobs.pool = pool_rates.pool WHERE jobs.id = ?`),
}, "\nUNION ALL\n") + "\nORDER BY 1, 2")

// NullFloat is a nullable float column, read as 0 when NULL, through
// database/sql's Scanner or pgx's Float64Scanner (see NullInt).
type NullFloat float64

// Scan implements sql.Scanner.
func (f *NullFloat) Scan(src any) error {
	switch v := src.(type) {
	case float64:
		*f = NullFloat(v)
	case int64: // SQLite stores a whole REAL as an integer
		*f = NullFloat(v)
	case nil:
		*f = 0
	default:
		return fmt.Errorf("scan %T into a float column", src)
	}
	return nil
}

// ScanFloat64 implements pgtype.Float64Scanner.
func (f *NullFloat) ScanFloat64(v pgtype.Float8) error {
	*f = NullFloat(v.Float64)
	return nil
}

// detailRow is one row of qJobDetail.
type detailRow struct {
	kind   int64
	ints   [detailInts]NullInt
	floats [detailFloats]NullFloat
	texts  [detailTexts]NullString
	dest   []any
}

func newDetailRow() *detailRow {
	r := &detailRow{}
	r.dest = make([]any, 0, 1+detailInts+detailFloats+detailTexts)
	r.dest = append(r.dest, &r.kind)
	for i := range r.ints {
		r.dest = append(r.dest, &r.ints[i])
	}
	for i := range r.floats {
		r.dest = append(r.dest, &r.floats[i])
	}
	for i := range r.texts {
		r.dest = append(r.dest, &r.texts[i])
	}
	return r
}

// JobDetail implements store.Jobs: a job with its attempts, events and its
// pool's rate history, in one statement.
func (s Shared) JobDetail(ctx context.Context, id int64) (store.JobDetail, error) {
	var d store.JobDetail
	r, err := s.b.Reader()
	if err != nil {
		return d, err
	}
	var found, foundMore bool // the job's two rows: both or neither
	row := newDetailRow()
	err = r.Query(ctx, func(sr Row) error {
		if err := sr.Scan(row.dest...); err != nil {
			return err
		}
		n, t := &row.ints, &row.texts
		switch row.kind {
		case detailJob:
			found = true
			d.Job = detailJobOf(row)
		case detailJobMore:
			foundMore = true
			detailJobMoreOf(row, &d.Job)
		case detailAttempt:
			a := domain.Attempt{JobID: id, Number: int(n[0].V), State: domain.AttemptState(t[0]),
				Reason: domain.Reason(t[1]), Message: string(t[2]), Node: string(t[3]),
				CreatedAt: n[2].Time(), StartedAt: n[3].Time(), FinishedAt: n[4].Time(), Borrowed: n[6].V != 0,
				Usage: domain.Usage{CPUSeconds: float64(row.floats[0]), MaxRSS: domain.ByteSize(n[5].V), GPUSeconds: float64(row.floats[1])}}
			if n[1].Valid {
				code := int(n[1].V)
				a.ExitCode = &code
			}
			var err error
			if a.GPUs, err = column.ParseGPUs(string(t[4])); err != nil {
				return fmt.Errorf("attempt %d of job %d: %w", a.Number, id, err)
			}
			d.Attempts = append(d.Attempts, a)
		case detailEvent:
			d.Events = append(d.Events, domain.Event{ID: n[0].V, JobID: id, Attempt: int(n[1].V), At: n[2].Time(),
				From: domain.JobState(t[0]), To: domain.JobState(t[1]), Actor: string(t[2]),
				Reason: domain.Reason(t[3]), Message: string(t[4])})
		case detailRate:
			rates, err := column.ParseRates(string(t[0]))
			if err != nil {
				return fmt.Errorf("pool %q from %d: %w", d.Job.Pool, n[0].V, err)
			}
			d.Rates = append(d.Rates, store.RateChange{Pool: d.Job.Pool, From: time.Unix(0, n[0].V).UTC(), Rates: rates})
		default:
			return fmt.Errorf("job detail: a row of unknown kind %d", row.kind)
		}
		return nil
	}, qJobDetail, id, id, id, id, id)
	if err != nil {
		return store.JobDetail{}, s.err(fmt.Sprintf("get job %d", id), err)
	}
	if !found || !foundMore {
		return store.JobDetail{}, fmt.Errorf("get job %d: %w", id, store.ErrNotFound)
	}
	return d, nil
}

// detailJobOf reads the job of a detailJob row, as ScanJob does; a
// detailJobMore row (detailJobMoreOf) has the rest.
func detailJobOf(row *detailRow) domain.Job {
	n, t := &row.ints, &row.texts
	return domain.Job{ID: n[0].V, Name: string(t[0]), Project: string(t[1]), Pool: string(t[2]),
		State: domain.JobState(t[3]), Reason: domain.Reason(t[4]), Message: string(t[5]), Priority: domain.Priority(t[6]),
		SubmittedAt: n[1].Time(), UpdatedAt: n[2].Time(), StartedAt: n[3].Time(), FinishedAt: n[4].Time(),
		Attempts: int(n[5].V), NextAttempt: n[6].Time(), CancelRequested: n[7].V != 0,
		Resources: domain.Resources{GPUs: int(n[8].V), CPUs: float64(row.floats[0])}}
}

// detailJobMoreOf reads the rest of j from a detailJobMore row, as
// ScanJob and scanCode do.
func detailJobMoreOf(row *detailRow, j *domain.Job) {
	n, t := &row.ints, &row.texts
	j.Resources.Memory, j.Resources.Nodes = domain.ByteSize(n[0].V), int(n[1].V)
	j.Timeout, j.Preemptible, j.PreemptRequested = domain.Duration(n[2].V), n[3].V != 0, n[4].V != 0
	j.Preemptions, j.RerunOf = int(n[5].V), n[6].V
	j.Submitter, j.SpecHash, j.OutputDir, j.IdempotencyKey = string(t[0]), string(t[1]), string(t[2]), string(t[3])
	j.SpecJSON = []byte(t[4])
	if t[5] != "" { // job_code.sha256 is NOT NULL: a row is there
		j.Code = &domain.CodeRef{SHA256: string(t[5]), Commit: string(t[6]), Dirty: n[7].V != 0}
	}
}
