-- Initial schema. Plain SQL types only, so the PostgreSQL backend can mirror
-- it: times are integer Unix nanoseconds in UTC (NULL for the zero time),
-- booleans are 0/1 integers, GPU lists are comma-separated text.

-- Config snapshots are content-addressed by the SHA-256 of their canonical
-- JSON and never change once written.
CREATE TABLE snapshots (
    hash      TEXT PRIMARY KEY,
    spec_json TEXT NOT NULL
);

CREATE TRIGGER snapshots_no_update BEFORE UPDATE ON snapshots
BEGIN
    SELECT RAISE(ABORT, 'snapshots are immutable: a config snapshot cannot be updated');
END;

CREATE TRIGGER snapshots_no_delete BEFORE DELETE ON snapshots
BEGIN
    SELECT RAISE(ABORT, 'snapshots are immutable: a config snapshot cannot be deleted');
END;

-- AUTOINCREMENT keeps ids strictly increasing and never reused, even after
-- the newest row is deleted.
CREATE TABLE jobs (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    name             TEXT    NOT NULL,
    project          TEXT    NOT NULL,
    pool             TEXT    NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN ('queued', 'held', 'starting', 'running', 'succeeded', 'failed', 'canceled')),
    reason           TEXT    NOT NULL DEFAULT '',
    message          TEXT    NOT NULL DEFAULT '',
    priority         TEXT    NOT NULL DEFAULT '',
    submitter        TEXT    NOT NULL,
    submitted_at     INTEGER,
    updated_at       INTEGER,
    started_at       INTEGER,
    finished_at      INTEGER,
    spec_hash        TEXT    NOT NULL REFERENCES snapshots (hash),
    output_dir       TEXT    UNIQUE,
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  INTEGER,
    cancel_requested INTEGER NOT NULL DEFAULT 0 CHECK (cancel_requested IN (0, 1)),
    idempotency_key  TEXT    NOT NULL DEFAULT '',
    -- The request, copied from the snapshot so list rows and the scheduler
    -- need not decode specs.
    req_gpus         INTEGER NOT NULL DEFAULT 0,
    req_cpus         REAL    NOT NULL DEFAULT 0,
    req_memory       INTEGER NOT NULL DEFAULT 0,
    req_nodes        INTEGER NOT NULL DEFAULT 0,
    req_timeout_ns   INTEGER NOT NULL DEFAULT 0,
    preemptible      INTEGER NOT NULL DEFAULT 0 CHECK (preemptible IN (0, 1)),
    preempt_requested INTEGER NOT NULL DEFAULT 0 CHECK (preempt_requested IN (0, 1)),
    preemptions      INTEGER NOT NULL DEFAULT 0
);

CREATE UNIQUE INDEX jobs_submitter_idempotency_key ON jobs (submitter, idempotency_key)
    WHERE idempotency_key <> '';
CREATE INDEX jobs_state_id ON jobs (state, id);
CREATE INDEX jobs_project_id ON jobs (project, id);

CREATE TABLE attempts (
    job_id      INTEGER NOT NULL REFERENCES jobs (id),
    number      INTEGER NOT NULL CHECK (number > 0),
    state       TEXT    NOT NULL,
    reason      TEXT    NOT NULL DEFAULT '',
    message     TEXT    NOT NULL DEFAULT '',
    exit_code   INTEGER,
    node        TEXT    NOT NULL DEFAULT '',
    gpus        TEXT    NOT NULL DEFAULT '',
    created_at  INTEGER,
    started_at  INTEGER,
    finished_at INTEGER,
    cpu_seconds REAL    NOT NULL DEFAULT 0,
    max_rss     INTEGER NOT NULL DEFAULT 0,
    borrowed    INTEGER NOT NULL DEFAULT 0 CHECK (borrowed IN (0, 1)),
    PRIMARY KEY (job_id, number)
);

CREATE INDEX attempts_state ON attempts (state);

CREATE TABLE events (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id     INTEGER NOT NULL REFERENCES jobs (id),
    attempt    INTEGER NOT NULL DEFAULT 0,
    at         INTEGER,
    from_state TEXT    NOT NULL DEFAULT '',
    to_state   TEXT    NOT NULL,
    actor      TEXT    NOT NULL DEFAULT '',
    reason     TEXT    NOT NULL DEFAULT '',
    message    TEXT    NOT NULL DEFAULT ''
);

CREATE INDEX events_job_id ON events (job_id, id);

CREATE TABLE tokens (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    name       TEXT    NOT NULL,
    subject    TEXT    NOT NULL,
    role       TEXT    NOT NULL,
    hash       TEXT    NOT NULL UNIQUE,
    created_at INTEGER,
    expires_at INTEGER,
    revoked_at INTEGER
);
