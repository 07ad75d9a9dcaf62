-- A budget's spend-rate limit: what the project's running jobs may cost
-- per hour together, in micros; 0: none.
ALTER TABLE budgets ADD COLUMN max_rate BIGINT NOT NULL DEFAULT 0;
