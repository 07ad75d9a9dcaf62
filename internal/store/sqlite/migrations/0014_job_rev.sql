-- Every write to a job stamps it with the writer's batch number (rev), in
-- commit order: the control loop reads only the jobs written since its last
-- look (ChangedJobs) instead of every active job each cycle.
ALTER TABLE jobs ADD COLUMN rev INTEGER NOT NULL DEFAULT 0;
CREATE INDEX jobs_rev ON jobs (rev);
