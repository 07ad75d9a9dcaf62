-- Every write to a job records the writing transaction's id, so the control
-- loop can read only the jobs written since its last look (ChangedJobs)
-- instead of every active job each cycle. Transactions commit out of id
-- order, so a reader re-reads from the oldest transaction still running at
-- its previous look (pg_snapshot_xmin), never past one that may commit.
ALTER TABLE jobs ADD COLUMN changed_xid xid8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX jobs_changed_xid ON jobs (changed_xid);
