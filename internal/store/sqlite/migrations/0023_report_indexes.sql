-- Review reports count the jobs submitted and first started in a window:
-- these indexes hold what they read, so the count walks the window only.
CREATE INDEX jobs_submitted_at ON jobs (submitted_at, project, pool);
CREATE INDEX jobs_started_at ON jobs (started_at, submitted_at, project, pool);
