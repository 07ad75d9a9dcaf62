-- A job is inserted without a start or a usage time, and these indexes were
-- given an entry for it all the same: two more b-trees every submit writes
-- into, and two more pages every commit writes to the WAL, for entries no
-- query reads (each compares the time with a bound, which a NULL never
-- meets). Partial indexes take a job in when it gains the time.
DROP INDEX jobs_started_at;
CREATE INDEX jobs_started_at ON jobs (started_at, submitted_at, project, pool) WHERE started_at IS NOT NULL;
DROP INDEX jobs_usage_at;
CREATE INDEX jobs_usage_at ON jobs (usage_at) WHERE usage_at IS NOT NULL;
