package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// RecordManifest replaces the manifest of one attempt.
func (s *Store) RecordManifest(ctx context.Context, m domain.Manifest) error {
	if m.JobID <= 0 || m.Attempt <= 0 {
		return fmt.Errorf("record manifest: a manifest needs a job and an attempt (got job %d attempt %d): %w", m.JobID, m.Attempt, store.ErrInvalid)
	}
	lin, err := json.Marshal(m.Lineage)
	if err != nil {
		return fmt.Errorf("record manifest: %w", err)
	}
	paths, sizes, sums := make([]string, len(m.Files)), make([]int64, len(m.Files)), make([]string, len(m.Files))
	for i, f := range m.Files {
		paths[i], sizes[i], sums[i] = f.Path, f.Size, f.SHA256
	}
	return s.write(ctx, func(w *writer) error {
		w.queue("record manifest", `DELETE FROM manifest_files WHERE job_id = $1 AND attempt = $2`, m.JobID, m.Attempt)
		w.queue("record manifest", `INSERT INTO manifests (job_id, attempt, at, lineage) VALUES ($1, $2, $3, $4)
			ON CONFLICT (job_id, attempt) DO UPDATE SET at = excluded.at, lineage = excluded.lineage`,
			m.JobID, m.Attempt, m.At.UnixNano(), string(lin))
		if len(m.Files) > 0 {
			w.queue("record manifest files", `INSERT INTO manifest_files (job_id, attempt, path, size, sha256)
				SELECT $1, $2, * FROM unnest($3::text[], $4::bigint[], $5::text[])`, m.JobID, m.Attempt, paths, sizes, sums)
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
	var (
		number int32
		at     int64
		lin    string
	)
	err := s.pool.QueryRow(ctx, `SELECT attempt, at, lineage FROM manifests WHERE job_id = $1 AND ($2 = 0 OR attempt = $2)
		ORDER BY attempt DESC LIMIT 1`, jobID, attempt).Scan(&number, &at, &lin)
	if errors.Is(err, pgx.ErrNoRows) {
		return m, fmt.Errorf("job %d has no recorded outputs yet (a manifest is recorded when an attempt ends): %w", jobID, store.ErrNotFound)
	}
	if err != nil {
		return m, interpretError("get manifest", err)
	}
	m.Attempt, m.At = int(number), unixNano(at)
	if err := json.Unmarshal([]byte(lin), &m.Lineage); err != nil {
		return m, fmt.Errorf("get manifest of job %d: stored lineage is not JSON: %w", jobID, err)
	}
	rows, err := s.pool.Query(ctx, `SELECT path, size, sha256 FROM manifest_files WHERE job_id = $1 AND attempt = $2
		ORDER BY path COLLATE "C"`, jobID, m.Attempt)
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
		w.queueCheck(func(tag pgconn.CommandTag, err error) error {
			added = err == nil && tag.RowsAffected() > 0
			return interpretError("record checkpoint", err)
		}, `INSERT INTO checkpoints (job_id, name, attempt, path, size, files, at, sha256) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
			ON CONFLICT (job_id, name) DO UPDATE SET attempt = excluded.attempt, path = excluded.path, size = excluded.size,
				files = excluded.files, at = excluded.at, sha256 = excluded.sha256, resumed_by = 0, suspect = '', deleted_at = NULL
			WHERE checkpoints.sha256 <> excluded.sha256 OR checkpoints.deleted_at IS NOT NULL`,
			c.JobID, c.Name, c.Attempt, c.Path, c.Size, int64(c.Files), c.At.UnixNano(), c.SHA256)
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
		WHERE job_id = $1 AND ($2 OR deleted_at IS NULL) ORDER BY job_id, at, name COLLATE "C"`, []any{jobID, withDeleted}
	if jobID == 0 {
		q, args = `SELECT job_id, name, attempt, path, size, files, at, sha256, resumed_by, suspect, deleted_at FROM checkpoints
		WHERE $1 OR deleted_at IS NULL ORDER BY job_id, at, name COLLATE "C"`, []any{withDeleted}
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, interpretError("list checkpoints", err)
	}
	defer rows.Close()
	var out []domain.CheckpointRecord
	for rows.Next() {
		var (
			c       domain.CheckpointRecord
			attempt int32
			resumed int32
			files   int64
			at      int64
			del     pgtype.Int8
		)
		if err := rows.Scan(&c.JobID, &c.Name, &attempt, &c.Path, &c.Size, &files, &at, &c.SHA256, &resumed, &c.Suspect, &del); err != nil {
			return nil, interpretError("list checkpoints", err)
		}
		c.Attempt, c.ResumedBy, c.Files, c.At, c.Deleted = int(attempt), int(resumed), int(files), unixNano(at), timeOf(del)
		out = append(out, c)
	}
	return out, interpretError("list checkpoints", rows.Err())
}

// MarkCheckpointDeleted records a checkpoint's removal.
func (s *Store) MarkCheckpointDeleted(ctx context.Context, jobID int64, name string, at time.Time, audit *domain.AuditRecord) error {
	return s.write(ctx, func(w *writer) error {
		tag, err := w.exec(`UPDATE checkpoints SET deleted_at = $1 WHERE job_id = $2 AND name = $3 AND deleted_at IS NULL`,
			at.UnixNano(), jobID, name)
		if err != nil {
			return interpretError("mark checkpoint deleted", err)
		}
		if tag.RowsAffected() == 0 {
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
	return s.markCheckpoint(ctx, "mark checkpoint resumed", jobID, name, `resumed_by = $1`, int32(attempt))
}

// MarkCheckpointSuspect records why resuming skips a checkpoint.
func (s *Store) MarkCheckpointSuspect(ctx context.Context, jobID int64, name, why string) error {
	if why == "" {
		return fmt.Errorf("mark checkpoint suspect: say why resuming skips checkpoint %q: %w", name, store.ErrInvalid)
	}
	return s.markCheckpoint(ctx, "mark checkpoint suspect", jobID, name, `suspect = $1`, why)
}

// markCheckpoint sets one column ($1) of a checkpoint that exists (not
// deleted).
func (s *Store) markCheckpoint(ctx context.Context, action string, jobID int64, name, set string, v any) error {
	return s.write(ctx, func(w *writer) error {
		w.queueCheck(func(tag pgconn.CommandTag, err error) error {
			if err != nil {
				return interpretError(action, err)
			}
			if tag.RowsAffected() == 0 {
				return fmt.Errorf("%s: job %d has no checkpoint %q: %w", action, jobID, name, store.ErrNotFound)
			}
			return nil
		}, `UPDATE checkpoints SET `+set+` WHERE job_id = $2 AND name = $3 AND deleted_at IS NULL`, v, jobID, name)
		return nil
	})
}
