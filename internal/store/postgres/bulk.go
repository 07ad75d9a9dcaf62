package postgres

import (
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"trainyard/internal/store"
)

// The rows that submits write (snapshots, jobs, code packages, submit events)
// and every audit record are not queued as one statement each: they gather
// in the writer's bulk buffers and go to the server as one multi-row INSERT
// per table (arrays unnested), just before the next statement that must
// follow them, the next read, or the commit. A batch of 60 submits then
// costs five statements instead of three hundred.

const (
	bulkSnapshotsSQL = `INSERT INTO snapshots (hash, spec_json)
		SELECT * FROM unnest($1::text[], $2::text[]) ON CONFLICT (hash) DO NOTHING`
	bulkJobsSQL = `INSERT INTO jobs (id, name, project, pool, state, reason, message, priority, submitter,
		submitted_at, updated_at, spec_hash, idempotency_key, req_gpus, req_cpus, req_memory, req_nodes,
		req_timeout_ns, preemptible, rerun_of, output_dir, sweep_id)
		SELECT id, name, project, pool, state, reason, msg, priority, submitter, at, at, hash, idem,
			gpus, cpus, mem, nodes, timeout, preemptible, rerun, dir, sweep
		FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
			$9::bigint[], $10::text[], $11::text[], $12::bigint[], $13::float8[], $14::bigint[], $15::bigint[],
			$16::bigint[], $17::int[], $18::bigint[], $19::text[], $20::text[], $21::bigint[])
		AS r(id, name, project, pool, state, reason, priority, submitter, at, hash, idem,
			gpus, cpus, mem, nodes, timeout, preemptible, rerun, dir, msg, sweep)`
	bulkWaitsSQL = `INSERT INTO job_waits (job_id, on_job, on_sweep, on_cond)
		SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::text[])`
	bulkCodeSQL = `INSERT INTO job_code (job_id, sha256, git_commit, dirty)
		SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::int[])`
	bulkEventsSQL = `INSERT INTO events (job_id, attempt, at, from_state, to_state, actor, reason, message)
		SELECT * FROM unnest($1::bigint[], $2::int[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[])`
	bulkAuditSQL = `INSERT INTO audit (seq, at, actor, action, target, before_json, after_json, result,
		detail, client, prev_hash, hash)
		SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
			$8::text[], $9::text[], $10::text[], $11::text[], $12::text[])`
)

// bulk holds rows waiting for their multi-row INSERT, one slice per column.
type bulk struct {
	snapHash, snapJSON []string
	snapSeen           map[string]bool

	jobID                                                          []int64
	jobName, jobProject, jobPool, jobState, jobReason, jobPriority []string
	jobSubmitter                                                   []string
	jobAt                                                          []*int64
	jobHash, jobIdem                                               []string
	jobGPUs                                                        []int64
	jobCPUs                                                        []float64
	jobMem, jobNodes, jobTimeout                                   []int64
	jobPreemptible                                                 []int32
	jobRerun                                                       []*int64
	jobDir                                                         []*string
	jobMessage                                                     []string
	jobSweep                                                       []*int64

	waitJob, waitOnJob, waitOnSweep []int64
	waitCond                        []string

	codeJob             []int64
	codeSHA, codeCommit []string
	codeDirty           []int32

	evJob                                      []int64
	evAttempt                                  []int32
	evAt                                       []*int64
	evFrom, evTo, evActor, evReason, evMessage []string

	auSeq, auAt                                              []int64
	auActor, auAction, auTarget, auBefore, auAfter, auResult []string
	auDetail, auClient, auPrev, auHash                       []string
}

// bulkMark is the size of each buffer at one moment.
type bulkMark struct{ snaps, jobs, code, events, audit, waits int }

func (b *bulk) mark() bulkMark {
	return bulkMark{len(b.snapHash), len(b.jobID), len(b.codeJob), len(b.evJob), len(b.auSeq), len(b.waitJob)}
}

func (b *bulk) empty() bool { return b.mark() == bulkMark{} }

// truncate drops the rows added after m.
func (b *bulk) truncate(m bulkMark) {
	for _, h := range b.snapHash[m.snaps:] {
		delete(b.snapSeen, h)
	}
	b.snapHash, b.snapJSON = b.snapHash[:m.snaps], b.snapJSON[:m.snaps]
	n := m.jobs
	b.jobID, b.jobName, b.jobProject, b.jobPool = b.jobID[:n], b.jobName[:n], b.jobProject[:n], b.jobPool[:n]
	b.jobState, b.jobReason, b.jobPriority, b.jobSubmitter = b.jobState[:n], b.jobReason[:n], b.jobPriority[:n], b.jobSubmitter[:n]
	b.jobAt, b.jobHash, b.jobIdem, b.jobGPUs, b.jobCPUs = b.jobAt[:n], b.jobHash[:n], b.jobIdem[:n], b.jobGPUs[:n], b.jobCPUs[:n]
	b.jobMem, b.jobNodes, b.jobTimeout = b.jobMem[:n], b.jobNodes[:n], b.jobTimeout[:n]
	b.jobPreemptible, b.jobRerun, b.jobDir = b.jobPreemptible[:n], b.jobRerun[:n], b.jobDir[:n]
	b.jobMessage, b.jobSweep = b.jobMessage[:n], b.jobSweep[:n]
	n = m.waits
	b.waitJob, b.waitOnJob, b.waitOnSweep, b.waitCond = b.waitJob[:n], b.waitOnJob[:n], b.waitOnSweep[:n], b.waitCond[:n]
	n = m.code
	b.codeJob, b.codeSHA, b.codeCommit, b.codeDirty = b.codeJob[:n], b.codeSHA[:n], b.codeCommit[:n], b.codeDirty[:n]
	n = m.events
	b.evJob, b.evAttempt, b.evAt, b.evFrom = b.evJob[:n], b.evAttempt[:n], b.evAt[:n], b.evFrom[:n]
	b.evTo, b.evActor, b.evReason, b.evMessage = b.evTo[:n], b.evActor[:n], b.evReason[:n], b.evMessage[:n]
	n = m.audit
	b.auSeq, b.auAt, b.auActor, b.auAction, b.auTarget = b.auSeq[:n], b.auAt[:n], b.auActor[:n], b.auAction[:n], b.auTarget[:n]
	b.auBefore, b.auAfter, b.auResult, b.auDetail = b.auBefore[:n], b.auAfter[:n], b.auResult[:n], b.auDetail[:n]
	b.auClient, b.auPrev, b.auHash = b.auClient[:n], b.auPrev[:n], b.auHash[:n]
}

func (b *bulk) addSnapshot(hash, specJSON string) {
	if b.snapSeen == nil {
		b.snapSeen = map[string]bool{}
	}
	if b.snapSeen[hash] {
		return
	}
	b.snapSeen[hash] = true
	b.snapHash, b.snapJSON = append(b.snapHash, hash), append(b.snapJSON, specJSON)
}

func (b *bulk) addEvent(job int64, attempt int32, at *int64, from, to, actor, reason, message string) {
	b.evJob, b.evAttempt, b.evAt = append(b.evJob, job), append(b.evAttempt, attempt), append(b.evAt, at)
	b.evFrom, b.evTo, b.evActor = append(b.evFrom, from), append(b.evTo, to), append(b.evActor, actor)
	b.evReason, b.evMessage = append(b.evReason, reason), append(b.evMessage, message)
}

// materialize turns the buffered rows into queued statements, in an order
// the foreign keys accept, and empties the buffers.
func (w *writer) materialize() {
	b := &w.bulk
	if b.empty() {
		return
	}
	w.materialized++
	add := func(check func(pgconn.CommandTag, error) error, sql string, args ...any) {
		w.queued++
		w.pending = append(w.pending, pendingStmt{sql: sql, args: args, check: check})
	}
	plain := func(action string) func(pgconn.CommandTag, error) error {
		return func(_ pgconn.CommandTag, err error) error { return interpretError(action, err) }
	}
	if len(b.snapHash) > 0 {
		add(plain("create job: store config snapshot"), bulkSnapshotsSQL, b.snapHash, b.snapJSON)
	}
	if len(b.jobID) > 0 {
		dir, submitter, key := "", "", ""
		if len(b.jobID) == 1 {
			if b.jobDir[0] != nil {
				dir = *b.jobDir[0]
			}
			submitter, key = b.jobSubmitter[0], b.jobIdem[0]
		}
		add(func(_ pgconn.CommandTag, err error) error {
			switch violatedConstraint(err) {
			case outputDirConstraint:
				if dir == "" {
					return fmt.Errorf("create job: an output directory is already used by another job (%v): %w", err, store.ErrConflict)
				}
				return fmt.Errorf("create job: output directory %s is already used by another job: %w", dir, store.ErrConflict)
			case idemKeyConstraint:
				return fmt.Errorf("create job: another submit by %q with idempotency key %q is being stored at this moment; retry to get its job: %w",
					submitter, key, store.ErrConflict)
			}
			return interpretError("create job", err)
		}, bulkJobsSQL, b.jobID, b.jobName, b.jobProject, b.jobPool, b.jobState, b.jobReason, b.jobPriority, b.jobSubmitter,
			b.jobAt, b.jobHash, b.jobIdem, b.jobGPUs, b.jobCPUs, b.jobMem, b.jobNodes, b.jobTimeout, b.jobPreemptible,
			b.jobRerun, b.jobDir, b.jobMessage, b.jobSweep)
	}
	if len(b.waitJob) > 0 {
		add(plain("create job: record its dependencies"), bulkWaitsSQL, b.waitJob, b.waitOnJob, b.waitOnSweep, b.waitCond)
	}
	if len(b.codeJob) > 0 {
		add(plain("create job: record code package"), bulkCodeSQL, b.codeJob, b.codeSHA, b.codeCommit, b.codeDirty)
	}
	if len(b.evJob) > 0 {
		add(plain("record events"), bulkEventsSQL, b.evJob, b.evAttempt, b.evAt, b.evFrom, b.evTo, b.evActor, b.evReason, b.evMessage)
	}
	if len(b.auSeq) > 0 {
		first := b.auSeq[0]
		add(plain(fmt.Sprintf("append audit records from %d", first)), bulkAuditSQL, b.auSeq, b.auAt, b.auActor, b.auAction,
			b.auTarget, b.auBefore, b.auAfter, b.auResult, b.auDetail, b.auClient, b.auPrev, b.auHash)
	}
	// The statements now own the slices: start new ones.
	w.bulk = bulk{}
}
