-- A submit looks for the same user's live or recent jobs of its snapshot
-- (SameSpecJobs): this index finds them among the user's newest jobs
-- without reading the rows of the others.
CREATE INDEX jobs_submitter_spec_id ON jobs (submitter, spec_hash, id);
