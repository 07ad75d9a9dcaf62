-- Training metrics (one row per reported value) and the health state of
-- attempts: when each last reported progress, and why the control loop
-- stopped it (HealthCheckFailed or Stalled), kept so that its end maps to
-- that reason after a restart.
CREATE TABLE metric_points (
    job_id  BIGINT  NOT NULL,
    attempt INTEGER NOT NULL,
    step    BIGINT  NOT NULL,
    key     TEXT    NOT NULL,
    value   DOUBLE PRECISION NOT NULL,
    at      BIGINT  NOT NULL
);

-- Unique, so that reading an attempt's metric log again after a restart adds
-- nothing twice (inserts ignore duplicates).
CREATE UNIQUE INDEX metric_points_series ON metric_points (job_id, key, step, at, attempt);

ALTER TABLE attempts ADD COLUMN last_progress_at BIGINT;
ALTER TABLE attempts ADD COLUMN health_failed TEXT NOT NULL DEFAULT '';
ALTER TABLE attempts ADD COLUMN health_message TEXT NOT NULL DEFAULT '';
