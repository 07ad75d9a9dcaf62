-- Where a checkpoint is held: object_at is when a copy in the object store
-- was verified (NULL: none there); local_gone_at when its local copy was
-- removed with the object copy kept (NULL: the local copy is there).
ALTER TABLE checkpoints ADD COLUMN object_at BIGINT;
ALTER TABLE checkpoints ADD COLUMN local_gone_at BIGINT;
-- The lifecycle pass reads checkpoints by registration time.
CREATE INDEX checkpoints_at ON checkpoints (at);
