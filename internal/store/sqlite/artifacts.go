package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

var _ store.Artifacts = (*Store)(nil)

// RecordManifest replaces the manifest of one attempt.
func (s *Store) RecordManifest(ctx context.Context, m domain.Manifest) error {
	if m.JobID <= 0 || m.Attempt <= 0 {
		return fmt.Errorf("record manifest: a manifest needs a job and an attempt (got job %d attempt %d): %w", m.JobID, m.Attempt, store.ErrInvalid)
	}
	lin, err := json.Marshal(m.Lineage)
	if err != nil {
		return fmt.Errorf("record manifest: %w", err)
	}
	return s.write(ctx, func(w *writer) error {
		if _, err := w.exec(`DELETE FROM manifest_files WHERE job_id = ? AND attempt = ?`, m.JobID, m.Attempt); err != nil {
			return interpretError("record manifest", err)
		}
		if _, err := w.exec(`INSERT INTO manifests (job_id, attempt, at, lineage) VALUES (?, ?, ?, ?)
			ON CONFLICT (job_id, attempt) DO UPDATE SET at = excluded.at, lineage = excluded.lineage`,
			m.JobID, m.Attempt, m.At.UnixNano(), string(lin)); err != nil {
			return interpretError("record manifest", err)
		}
		for _, f := range m.Files {
			if _, err := w.exec(`INSERT INTO manifest_files (job_id, attempt, path, size, sha256) VALUES (?, ?, ?, ?, ?)`,
				m.JobID, m.Attempt, f.Path, f.Size, f.SHA256); err != nil {
				return interpretError("record manifest", err)
			}
		}
		return nil
	})
}

// GetManifest returns one attempt's manifest (0: the latest).
func (s *Store) GetManifest(ctx context.Context, jobID int64, attempt int) (domain.Manifest, error) {
	if err := s.checkOpen(); err != nil {
		return domain.Manifest{}, err
	}
	m := domain.Manifest{JobID: jobID}
	var at int64
	var lin string
	err := s.readDB.QueryRowContext(ctx, `SELECT attempt, at, lineage FROM manifests WHERE job_id = ? AND (? = 0 OR attempt = ?)
		ORDER BY attempt DESC LIMIT 1`, jobID, attempt, attempt).Scan(&m.Attempt, &at, &lin)
	if errors.Is(err, sql.ErrNoRows) {
		return m, fmt.Errorf("job %d has no recorded outputs yet (a manifest is recorded when an attempt ends): %w", jobID, store.ErrNotFound)
	}
	if err != nil {
		return m, interpretError("get manifest", err)
	}
	m.At = time.Unix(0, at).UTC()
	if err := json.Unmarshal([]byte(lin), &m.Lineage); err != nil {
		return m, fmt.Errorf("get manifest of job %d: stored lineage is not JSON: %w", jobID, err)
	}
	rows, err := s.readDB.QueryContext(ctx, `SELECT path, size, sha256 FROM manifest_files WHERE job_id = ? AND attempt = ? ORDER BY path`, jobID, m.Attempt)
	if err != nil {
		return m, interpretError("get manifest", err)
	}
	defer rows.Close()
	for rows.Next() {
		var f domain.ArtifactFile
		if err := rows.Scan(&f.Path, &f.Size, &f.SHA256); err != nil {
			return m, interpretError("get manifest", err)
		}
		m.Files = append(m.Files, f)
	}
	return m, interpretError("get manifest", rows.Err())
}

// RecordCheckpoint registers a complete checkpoint, or a new version of
// one whose digest changed or that was deleted.
func (s *Store) RecordCheckpoint(ctx context.Context, c domain.CheckpointRecord) (bool, error) {
	if c.JobID <= 0 || c.Name == "" {
		return false, fmt.Errorf("record checkpoint: a checkpoint needs a job and a name: %w", store.ErrInvalid)
	}
	added := false
	err := s.write(ctx, func(w *writer) error {
		res, err := w.exec(`INSERT INTO checkpoints (job_id, name, attempt, path, size, files, at, sha256) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (job_id, name) DO UPDATE SET attempt = excluded.attempt, path = excluded.path, size = excluded.size,
				files = excluded.files, at = excluded.at, sha256 = excluded.sha256, resumed_by = 0, suspect = '', deleted_at = NULL
			WHERE checkpoints.sha256 != excluded.sha256 OR checkpoints.deleted_at IS NOT NULL`,
			c.JobID, c.Name, c.Attempt, c.Path, c.Size, c.Files, c.At.UnixNano(), c.SHA256)
		if err != nil {
			return interpretError("record checkpoint", err)
		}
		n, _ := res.RowsAffected()
		added = n > 0
		return nil
	})
	return added && err == nil, err
}

// ListCheckpoints returns checkpoints oldest first.
func (s *Store) ListCheckpoints(ctx context.Context, jobID int64, withDeleted bool) ([]domain.CheckpointRecord, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	// One job's (the control loop asks at every launch) through the
	// primary key; every job's only for gc and usage.
	q, args := `SELECT job_id, name, attempt, path, size, files, at, sha256, resumed_by, suspect, deleted_at FROM checkpoints
		WHERE job_id = ? AND (? OR deleted_at IS NULL) ORDER BY job_id, at, name`, []any{jobID, withDeleted}
	if jobID == 0 {
		q, args = `SELECT job_id, name, attempt, path, size, files, at, sha256, resumed_by, suspect, deleted_at FROM checkpoints
		WHERE ? OR deleted_at IS NULL ORDER BY job_id, at, name`, []any{withDeleted}
	}
	rows, err := s.readDB.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, interpretError("list checkpoints", err)
	}
	defer rows.Close()
	var out []domain.CheckpointRecord
	for rows.Next() {
		var c domain.CheckpointRecord
		var at int64
		var del sql.NullInt64
		if err := rows.Scan(&c.JobID, &c.Name, &c.Attempt, &c.Path, &c.Size, &c.Files, &at, &c.SHA256, &c.ResumedBy, &c.Suspect, &del); err != nil {
			return nil, interpretError("list checkpoints", err)
		}
		c.At = time.Unix(0, at).UTC()
		if del.Valid {
			c.Deleted = time.Unix(0, del.Int64).UTC()
		}
		out = append(out, c)
	}
	return out, interpretError("list checkpoints", rows.Err())
}

// MarkCheckpointDeleted records a checkpoint's removal.
func (s *Store) MarkCheckpointDeleted(ctx context.Context, jobID int64, name string, at time.Time, audit *domain.AuditRecord) error {
	return s.write(ctx, func(w *writer) error {
		res, err := w.exec(`UPDATE checkpoints SET deleted_at = ? WHERE job_id = ? AND name = ? AND deleted_at IS NULL`, at.UnixNano(), jobID, name)
		if err != nil {
			return interpretError("mark checkpoint deleted", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("job %d has no checkpoint %q to delete: %w", jobID, name, store.ErrNotFound)
		}
		return nil
	}, auditOf(audit))
}

// MarkCheckpointResumed records the attempt handed a checkpoint to resume from.
func (s *Store) MarkCheckpointResumed(ctx context.Context, jobID int64, name string, attempt int) error {
	if attempt <= 0 {
		return fmt.Errorf("mark checkpoint resumed: attempt %d is not an attempt: %w", attempt, store.ErrInvalid)
	}
	return s.markCheckpoint(ctx, "mark checkpoint resumed", jobID, name, `resumed_by = ?`, attempt)
}

// MarkCheckpointSuspect records why resuming skips a checkpoint.
func (s *Store) MarkCheckpointSuspect(ctx context.Context, jobID int64, name, why string) error {
	if why == "" {
		return fmt.Errorf("mark checkpoint suspect: say why resuming skips checkpoint %q: %w", name, store.ErrInvalid)
	}
	return s.markCheckpoint(ctx, "mark checkpoint suspect", jobID, name, `suspect = ?`, why)
}

// markCheckpoint sets one column of a checkpoint that exists (not deleted).
func (s *Store) markCheckpoint(ctx context.Context, action string, jobID int64, name, set string, v any) error {
	return s.write(ctx, func(w *writer) error {
		res, err := w.exec(`UPDATE checkpoints SET `+set+` WHERE job_id = ? AND name = ? AND deleted_at IS NULL`, v, jobID, name)
		if err != nil {
			return interpretError(action, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("%s: job %d has no checkpoint %q: %w", action, jobID, name, store.ErrNotFound)
		}
		return nil
	})
}
