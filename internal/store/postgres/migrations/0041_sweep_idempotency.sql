-- A sweep submit may carry an idempotency key, unique per submitter: a
-- repeat with the same key returns the first sweep instead of another.
ALTER TABLE sweeps ADD COLUMN idempotency_key TEXT NOT NULL DEFAULT '';
CREATE UNIQUE INDEX sweeps_submitter_idempotency_key ON sweeps (submitter, idempotency_key)
    WHERE idempotency_key <> '';
