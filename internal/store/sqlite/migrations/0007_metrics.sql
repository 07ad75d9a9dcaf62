-- Training metrics (one row per reported value) and the health state of
-- attempts: when each last reported progress, and why the control loop
-- stopped it (HealthCheckFailed or Stalled), kept so that its end maps to
-- that reason after a restart.
CREATE TABLE metric_points (
    job_id  INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    step    INTEGER NOT NULL,
    key     TEXT    NOT NULL,
    value   REAL    NOT NULL,
    at      INTEGER NOT NULL
);

-- Unique, so that reading an attempt's metric log again after a restart adds
-- nothing twice (inserts ignore duplicates).
CREATE UNIQUE INDEX metric_points_series ON metric_points (job_id, key, step, at, attempt);

ALTER TABLE attempts ADD COLUMN last_progress_at INTEGER;
ALTER TABLE attempts ADD COLUMN health_failed TEXT NOT NULL DEFAULT '';
ALTER TABLE attempts ADD COLUMN health_message TEXT NOT NULL DEFAULT '';
