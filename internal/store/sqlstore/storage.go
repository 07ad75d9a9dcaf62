package sqlstore

import (
	"context"
	"database/sql"
	"time"

	"trainyard/internal/domain"
)

var (
	qStorageDayPut = Q(`INSERT INTO storage_days (day, job_id, tier, project, pool, submitter, job_name, byte_seconds)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (day, job_id, tier) DO NOTHING`)
	qStorageDays = Q(`SELECT day, job_id, tier, project, pool, submitter, job_name, byte_seconds FROM storage_days
		WHERE day >= ? AND day < ? ORDER BY day, job_id, tier{C}`)
	qStorageLatest = Q(`SELECT MAX(day) FROM storage_days`)
)

// RecordStorageDays stores accrued days, keeping those already stored.
func (s Shared) RecordStorageDays(ctx context.Context, days []domain.StorageDay) error {
	if len(days) == 0 {
		return nil
	}
	return s.b.Write(ctx, func(x Exec) error {
		for _, d := range days {
			if err := x.Queue("record storage days", qStorageDayPut, d.Day.UnixNano(), d.JobID, d.Tier, d.Project, d.Pool, d.Submitter, d.JobName, d.ByteSeconds); err != nil {
				return err
			}
		}
		return nil
	})
}

// ListStorageDays returns the accrued days in [from, to).
func (s Shared) ListStorageDays(ctx context.Context, from, to time.Time) ([]domain.StorageDay, error) {
	r, err := s.b.Reader()
	if err != nil {
		return nil, err
	}
	var out []domain.StorageDay
	if err := r.Query(ctx, func(row Row) error {
		var d domain.StorageDay
		var day int64
		if err := row.Scan(&day, &d.JobID, &d.Tier, &d.Project, &d.Pool, &d.Submitter, &d.JobName, &d.ByteSeconds); err != nil {
			return err
		}
		d.Day = time.Unix(0, day).UTC()
		out = append(out, d)
		return nil
	}, qStorageDays, from.UnixNano(), to.UnixNano()); err != nil {
		return nil, s.err("list storage days", err)
	}
	return out, nil
}

// LatestStorageDay is the last day accrued (zero: none).
func (s Shared) LatestStorageDay(ctx context.Context) (time.Time, error) {
	r, err := s.b.Reader()
	if err != nil {
		return time.Time{}, err
	}
	var day sql.NullInt64
	if err := r.QueryRow(ctx, qStorageLatest).Scan(&day); err != nil {
		return time.Time{}, s.err("latest storage day", err)
	}
	return TimeOf(day), nil
}
