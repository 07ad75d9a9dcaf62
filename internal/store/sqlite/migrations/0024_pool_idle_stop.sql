-- A pool's idle stop (domain.IdleStop): a running job whose GPUs all stay
-- under idle_stop_below utilisation (0–1) for idle_stop_for (nanoseconds)
-- is stopped; 0 and 0: off.
ALTER TABLE pools ADD COLUMN idle_stop_below REAL NOT NULL DEFAULT 0;
ALTER TABLE pools ADD COLUMN idle_stop_for INTEGER NOT NULL DEFAULT 0;
