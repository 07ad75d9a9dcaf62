-- Re-runs: a job submitted from another job's config snapshot names that job
-- here (its lineage); NULL for an ordinary submit.
ALTER TABLE jobs ADD COLUMN rerun_of BIGINT;
