-- A pool's log limit per attempt, in bytes: the default and ceiling of its
-- jobs' policy.log_limit (domain.EffectiveLogLimit). 0: the server's.
ALTER TABLE pools ADD COLUMN log_limit INTEGER NOT NULL DEFAULT 0;
