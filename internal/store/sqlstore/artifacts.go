package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

const checkpointCols = `job_id, name, attempt, path, size, files, at, sha256, resumed_by, suspect, deleted_at, object_at, local_gone_at`

var (
	qManifestFilesDelete = Q(`DELETE FROM manifest_files WHERE job_id = ? AND attempt = ?`)
	qManifestUpsert      = Q(`INSERT INTO manifests (job_id, attempt, at, lineage) VALUES (?, ?, ?, ?)
		ON CONFLICT (job_id, attempt) DO UPDATE SET at = excluded.at, lineage = excluded.lineage`)
	qManifestFileInsert = Q(`INSERT INTO manifest_files (job_id, attempt, path, size, sha256) VALUES (?, ?, ?, ?, ?)`)
	// qManifestFilesInsert writes every file in one statement (PostgreSQL
	// only; SQLite runs qManifestFileInsert per file, in process).
	qManifestFilesInsert = Each(``, `INSERT INTO manifest_files (job_id, attempt, path, size, sha256)
		SELECT $1, $2, * FROM unnest($3::text[], $4::bigint[], $5::text[])`)
	qManifestGet = Q(`SELECT attempt, at, lineage FROM manifests WHERE job_id = ? AND (? = 0 OR attempt = ?)
		ORDER BY attempt DESC LIMIT 1`)
	qManifestFiles = Q(`SELECT path, size, sha256 FROM manifest_files WHERE job_id = ? AND attempt = ? ORDER BY path{C}`)
	qCheckpointPut = Q(`INSERT INTO checkpoints (job_id, name, attempt, path, size, files, at, sha256) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (job_id, name) DO UPDATE SET attempt = excluded.attempt, path = excluded.path, size = excluded.size,
			files = excluded.files, at = excluded.at, sha256 = excluded.sha256, resumed_by = 0, suspect = '', deleted_at = NULL,
			object_at = NULL, local_gone_at = NULL
		WHERE checkpoints.sha256 <> excluded.sha256 OR checkpoints.deleted_at IS NOT NULL`)
	// One job's checkpoints (the control loop asks at every launch)
	// through the primary key; every job's only for gc and usage.
	qCheckpointsOfJob = Q(`SELECT ` + checkpointCols + ` FROM checkpoints
		WHERE job_id = ? AND (? OR deleted_at IS NULL) ORDER BY job_id, at, name{C}`)
	qCheckpointsAll = Q(`SELECT ` + checkpointCols + ` FROM checkpoints
		WHERE ? OR deleted_at IS NULL ORDER BY job_id, at, name{C}`)
	qCheckpointDeleted = Q(`UPDATE checkpoints SET deleted_at = ? WHERE job_id = ? AND name = ? AND deleted_at IS NULL`)
	qCheckpointResumed = Q(`UPDATE checkpoints SET resumed_by = ? WHERE job_id = ? AND name = ? AND deleted_at IS NULL`)
	qCheckpointSuspect = Q(`UPDATE checkpoints SET suspect = ? WHERE job_id = ? AND name = ? AND deleted_at IS NULL`)
	qCheckpointsAt     = Q(`SELECT ` + checkpointCols + ` FROM checkpoints
		WHERE at >= ? AND at < ? AND deleted_at IS NULL ORDER BY at, job_id, name{C}`)
	qCheckpointsHeld = Q(`SELECT ` + checkpointCols + ` FROM checkpoints
		WHERE deleted_at IS NULL OR deleted_at >= ? ORDER BY job_id, at, name{C}`)
	qCheckpointCopied = Q(`UPDATE checkpoints SET object_at = COALESCE(object_at, ?)
		WHERE job_id = ? AND name = ? AND sha256 = ? AND deleted_at IS NULL`)
	qCheckpointMoved = Q(`UPDATE checkpoints SET local_gone_at = ?
		WHERE job_id = ? AND name = ? AND object_at IS NOT NULL AND deleted_at IS NULL`)
	qCheckpointRestored = Q(`UPDATE checkpoints SET local_gone_at = NULL WHERE job_id = ? AND name = ? AND deleted_at IS NULL`)
	qManifestSizes      = Q(`SELECT m.job_id, m.attempt, m.at, COALESCE(SUM(f.size), 0) FROM manifests m
		LEFT JOIN manifest_files f ON f.job_id = m.job_id AND f.attempt = m.attempt
		GROUP BY m.job_id, m.attempt, m.at ORDER BY m.job_id, m.attempt`)
)

// RecordManifest replaces the manifest of one attempt.
func (s Shared) RecordManifest(ctx context.Context, m domain.Manifest) error {
	if m.JobID <= 0 || m.Attempt <= 0 {
		return fmt.Errorf("record manifest: a manifest needs a job and an attempt (got job %d attempt %d): %w", m.JobID, m.Attempt, store.ErrInvalid)
	}
	lin, err := json.Marshal(m.Lineage)
	if err != nil {
		return fmt.Errorf("record manifest: %w", err)
	}
	return s.b.Write(ctx, func(x Exec) error { return s.queueManifest(x, m, lin) })
}

// queueManifest replaces the manifest m of one attempt, whose lineage is
// lin (JSON), in x's transaction.
func (s Shared) queueManifest(x Exec, m domain.Manifest, lin []byte) error {
	if err := x.Queue("record manifest", qManifestFilesDelete, m.JobID, m.Attempt); err != nil {
		return err
	}
	if err := x.Queue("record manifest", qManifestUpsert, m.JobID, m.Attempt, m.At.UnixNano(), string(lin)); err != nil {
		return err
	}
	if s.e == Postgres {
		if len(m.Files) == 0 {
			return nil
		}
		paths, sizes, sums := make([]string, len(m.Files)), make([]int64, len(m.Files)), make([]string, len(m.Files))
		for i, f := range m.Files {
			paths[i], sizes[i], sums[i] = f.Path, f.Size, f.SHA256
		}
		return x.Queue("record manifest files", qManifestFilesInsert, m.JobID, m.Attempt, paths, sizes, sums)
	}
	for _, f := range m.Files {
		if err := x.Queue("record manifest", qManifestFileInsert, m.JobID, m.Attempt, f.Path, f.Size, f.SHA256); err != nil {
			return err
		}
	}
	return nil
}

// GetManifest returns one attempt's manifest (0: the latest).
func (s Shared) GetManifest(ctx context.Context, jobID int64, attempt int) (domain.Manifest, error) {
	r, err := s.b.Reader()
	if err != nil {
		return domain.Manifest{}, err
	}
	m := domain.Manifest{JobID: jobID}
	var at int64
	var lin string
	err = r.QueryRow(ctx, qManifestGet, jobID, attempt, attempt).Scan(&m.Attempt, &at, &lin)
	if s.b.IsNoRows(err) {
		return m, fmt.Errorf("job %d has no recorded outputs yet (a manifest is recorded when an attempt ends): %w", jobID, store.ErrNotFound)
	}
	if err != nil {
		return m, s.err("get manifest", err)
	}
	m.At = time.Unix(0, at).UTC()
	if err := json.Unmarshal([]byte(lin), &m.Lineage); err != nil {
		return m, fmt.Errorf("get manifest of job %d: stored lineage is not JSON: %w", jobID, err)
	}
	err = r.Query(ctx, func(row Row) error {
		var f domain.ArtifactFile
		if err := row.Scan(&f.Path, &f.Size, &f.SHA256); err != nil {
			return err
		}
		m.Files = append(m.Files, f)
		return nil
	}, qManifestFiles, jobID, m.Attempt)
	return m, s.err("get manifest", err)
}

// RecordCheckpoint registers a complete checkpoint, or a new version of
// one whose digest changed or that was deleted.
func (s Shared) RecordCheckpoint(ctx context.Context, c domain.CheckpointRecord) (bool, error) {
	if c.JobID <= 0 || c.Name == "" {
		return false, fmt.Errorf("record checkpoint: a checkpoint needs a job and a name: %w", store.ErrInvalid)
	}
	added := false
	err := s.b.Write(ctx, func(x Exec) error {
		return x.QueueCheck(func(n int64, err error) error {
			added = err == nil && n > 0
			return s.err("record checkpoint", err)
		}, qCheckpointPut, c.JobID, c.Name, c.Attempt, c.Path, c.Size, int64(c.Files), c.At.UnixNano(), c.SHA256)
	})
	return added && err == nil, err
}

// ListCheckpoints returns checkpoints oldest first.
func (s Shared) ListCheckpoints(ctx context.Context, jobID int64, withDeleted bool) ([]domain.CheckpointRecord, error) {
	q, args := qCheckpointsOfJob, []any{jobID, withDeleted}
	if jobID == 0 {
		q, args = qCheckpointsAll, []any{withDeleted}
	}
	return s.listCheckpoints(ctx, "list checkpoints", q, args...)
}

// ListCheckpointsAt returns kept checkpoints registered in [from, to).
func (s Shared) ListCheckpointsAt(ctx context.Context, from, to time.Time) ([]domain.CheckpointRecord, error) {
	return s.listCheckpoints(ctx, "list checkpoints by time", qCheckpointsAt, from.UnixNano(), to.UnixNano())
}

func (s Shared) listCheckpoints(ctx context.Context, action string, q Query, args ...any) ([]domain.CheckpointRecord, error) {
	r, err := s.b.Reader()
	if err != nil {
		return nil, err
	}
	var out []domain.CheckpointRecord
	if err := r.Query(ctx, func(row Row) error {
		var (
			c               domain.CheckpointRecord
			at              int64
			del, obj, lgone sql.NullInt64
		)
		if err := row.Scan(&c.JobID, &c.Name, &c.Attempt, &c.Path, &c.Size, &c.Files, &at, &c.SHA256, &c.ResumedBy, &c.Suspect, &del, &obj, &lgone); err != nil {
			return err
		}
		c.At, c.Deleted, c.Object, c.LocalGone = time.Unix(0, at).UTC(), TimeOf(del), TimeOf(obj), TimeOf(lgone)
		out = append(out, c)
		return nil
	}, q, args...); err != nil {
		return nil, s.err(action, err)
	}
	return out, nil
}

// ListCheckpointsHeld returns checkpoints kept at or after since.
func (s Shared) ListCheckpointsHeld(ctx context.Context, since time.Time) ([]domain.CheckpointRecord, error) {
	return s.listCheckpoints(ctx, "list held checkpoints", qCheckpointsHeld, since.UnixNano())
}

// MarkCheckpointCopied records a verified object copy of one version.
func (s Shared) MarkCheckpointCopied(ctx context.Context, jobID int64, name, sha256 string, at time.Time) error {
	return s.b.Write(ctx, func(x Exec) error {
		return x.QueueCheck(func(n int64, err error) error {
			if err != nil {
				return s.err("mark checkpoint copied", err)
			}
			if n == 0 {
				return fmt.Errorf("mark checkpoint copied: job %d has no kept checkpoint %q with sha256 %s: %w", jobID, name, sha256, store.ErrNotFound)
			}
			return nil
		}, qCheckpointCopied, at.UnixNano(), jobID, name, sha256)
	})
}

// MarkCheckpointMoved records that only the object copy is left.
func (s Shared) MarkCheckpointMoved(ctx context.Context, jobID int64, name string, at time.Time, audit *domain.AuditRecord) error {
	var recs []domain.AuditRecord
	if audit != nil {
		recs = append(recs, *audit)
	}
	return s.b.Write(ctx, func(x Exec) error {
		n, err := x.Exec(qCheckpointMoved, at.UnixNano(), jobID, name)
		if err != nil {
			return s.err("mark checkpoint moved", err)
		}
		if n == 0 {
			return fmt.Errorf("job %d has no kept checkpoint %q with an object copy to move to: %w", jobID, name, store.ErrNotFound)
		}
		return nil
	}, recs...)
}

// MarkCheckpointRestored records that the local copy is back.
func (s Shared) MarkCheckpointRestored(ctx context.Context, jobID int64, name string) error {
	return s.b.Write(ctx, func(x Exec) error {
		return x.QueueCheck(func(n int64, err error) error {
			if err != nil {
				return s.err("mark checkpoint restored", err)
			}
			if n == 0 {
				return fmt.Errorf("mark checkpoint restored: job %d has no kept checkpoint %q: %w", jobID, name, store.ErrNotFound)
			}
			return nil
		}, qCheckpointRestored, jobID, name)
	})
}

// ManifestSizes sums each manifest's files.
func (s Shared) ManifestSizes(ctx context.Context) ([]store.ManifestSize, error) {
	r, err := s.b.Reader()
	if err != nil {
		return nil, err
	}
	var out []store.ManifestSize
	if err := r.Query(ctx, func(row Row) error {
		var m store.ManifestSize
		var at int64
		if err := row.Scan(&m.JobID, &m.Attempt, &at, &m.Bytes); err != nil {
			return err
		}
		m.At = time.Unix(0, at).UTC()
		out = append(out, m)
		return nil
	}, qManifestSizes); err != nil {
		return nil, s.err("sum manifests", err)
	}
	return out, nil
}

// MarkCheckpointDeleted records a checkpoint's removal.
func (s Shared) MarkCheckpointDeleted(ctx context.Context, jobID int64, name string, at time.Time, audit *domain.AuditRecord) error {
	var recs []domain.AuditRecord
	if audit != nil {
		recs = append(recs, *audit)
	}
	return s.b.Write(ctx, func(x Exec) error {
		n, err := x.Exec(qCheckpointDeleted, at.UnixNano(), jobID, name)
		if err != nil {
			return s.err("mark checkpoint deleted", err)
		}
		if n == 0 {
			return fmt.Errorf("job %d has no checkpoint %q to delete: %w", jobID, name, store.ErrNotFound)
		}
		return nil
	}, recs...)
}

// MarkCheckpointResumed records the attempt handed a checkpoint to resume from.
func (s Shared) MarkCheckpointResumed(ctx context.Context, jobID int64, name string, attempt int) error {
	if attempt <= 0 {
		return fmt.Errorf("mark checkpoint resumed: attempt %d is not an attempt: %w", attempt, store.ErrInvalid)
	}
	return s.markCheckpoint(ctx, "mark checkpoint resumed", jobID, name, qCheckpointResumed, attempt)
}

// MarkCheckpointSuspect records why resuming skips a checkpoint.
func (s Shared) MarkCheckpointSuspect(ctx context.Context, jobID int64, name, why string) error {
	if why == "" {
		return fmt.Errorf("mark checkpoint suspect: say why resuming skips checkpoint %q: %w", name, store.ErrInvalid)
	}
	return s.markCheckpoint(ctx, "mark checkpoint suspect", jobID, name, qCheckpointSuspect, why)
}

// markCheckpoint sets one column (by q) of a checkpoint that exists (not
// deleted).
func (s Shared) markCheckpoint(ctx context.Context, action string, jobID int64, name string, q Query, v any) error {
	return s.b.Write(ctx, func(x Exec) error {
		return x.QueueCheck(func(n int64, err error) error {
			if err != nil {
				return s.err(action, err)
			}
			if n == 0 {
				return fmt.Errorf("%s: job %d has no checkpoint %q: %w", action, jobID, name, store.ErrNotFound)
			}
			return nil
		}, q, v, jobID, name)
	})
}
