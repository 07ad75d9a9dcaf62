-- A submit compares its request with what the same user's recent jobs of
-- the same name used (RecentUsage): this index finds those jobs without
-- reading the user's others.
CREATE INDEX jobs_submitter_name_id ON jobs (submitter, name, id);
