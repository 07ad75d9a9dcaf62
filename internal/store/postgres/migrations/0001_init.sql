-- Initial schema, mirroring the SQLite backend's 0001 table for table and
-- column for column, so data copies between the backends 1:1: times are
-- BIGINT Unix nanoseconds in UTC (NULL for the zero time; TIMESTAMPTZ keeps
-- only microseconds), booleans are 0/1 integers, GPU lists are
-- comma-separated text.

-- Config snapshots are content-addressed by the SHA-256 of their canonical
-- JSON and never change once written.
CREATE TABLE snapshots (
    hash      TEXT PRIMARY KEY,
    spec_json TEXT NOT NULL
);

CREATE FUNCTION snapshots_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'snapshots are immutable: a config snapshot cannot be updated or deleted (%)', TG_OP;
END;
$$;

CREATE TRIGGER snapshots_no_update BEFORE UPDATE OR DELETE ON snapshots
    FOR EACH ROW EXECUTE FUNCTION snapshots_immutable();

-- A sequence never reuses a value, so ids are strictly increasing.
CREATE TABLE jobs (
    id               BIGSERIAL PRIMARY KEY,
    name             TEXT    NOT NULL,
    project          TEXT    NOT NULL,
    pool             TEXT    NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN ('queued', 'held', 'starting', 'running', 'succeeded', 'failed', 'canceled')),
    reason           TEXT    NOT NULL DEFAULT '',
    message          TEXT    NOT NULL DEFAULT '',
    priority         TEXT    NOT NULL DEFAULT '',
    submitter        TEXT    NOT NULL,
    submitted_at     BIGINT,
    updated_at       BIGINT,
    started_at       BIGINT,
    finished_at      BIGINT,
    spec_hash        TEXT    NOT NULL REFERENCES snapshots (hash),
    output_dir       TEXT    CONSTRAINT jobs_output_dir_key UNIQUE,
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  BIGINT,
    cancel_requested INTEGER NOT NULL DEFAULT 0 CHECK (cancel_requested IN (0, 1)),
    idempotency_key  TEXT    NOT NULL DEFAULT '',
    -- The request, copied from the snapshot so list rows and the scheduler
    -- need not decode specs.
    req_gpus         BIGINT  NOT NULL DEFAULT 0,
    req_cpus         DOUBLE PRECISION NOT NULL DEFAULT 0,
    req_memory       BIGINT  NOT NULL DEFAULT 0,
    req_nodes        BIGINT  NOT NULL DEFAULT 0,
    req_timeout_ns   BIGINT  NOT NULL DEFAULT 0,
    preemptible      INTEGER NOT NULL DEFAULT 0 CHECK (preemptible IN (0, 1)),
    preempt_requested INTEGER NOT NULL DEFAULT 0 CHECK (preempt_requested IN (0, 1)),
    preemptions      INTEGER NOT NULL DEFAULT 0
);

CREATE UNIQUE INDEX jobs_submitter_idempotency_key ON jobs (submitter, idempotency_key)
    WHERE idempotency_key <> '';
CREATE INDEX jobs_state_id ON jobs (state, id);
CREATE INDEX jobs_project_id ON jobs (project, id);

CREATE TABLE attempts (
    job_id      BIGINT  NOT NULL REFERENCES jobs (id),
    number      INTEGER NOT NULL CHECK (number > 0),
    state       TEXT    NOT NULL,
    reason      TEXT    NOT NULL DEFAULT '',
    message     TEXT    NOT NULL DEFAULT '',
    exit_code   BIGINT,
    node        TEXT    NOT NULL DEFAULT '',
    gpus        TEXT    NOT NULL DEFAULT '',
    created_at  BIGINT,
    started_at  BIGINT,
    finished_at BIGINT,
    cpu_seconds DOUBLE PRECISION NOT NULL DEFAULT 0,
    max_rss     BIGINT  NOT NULL DEFAULT 0,
    borrowed    INTEGER NOT NULL DEFAULT 0 CHECK (borrowed IN (0, 1)),
    PRIMARY KEY (job_id, number)
);

CREATE INDEX attempts_state ON attempts (state);

CREATE TABLE events (
    id         BIGSERIAL PRIMARY KEY,
    job_id     BIGINT  NOT NULL REFERENCES jobs (id),
    attempt    INTEGER NOT NULL DEFAULT 0,
    at         BIGINT,
    from_state TEXT    NOT NULL DEFAULT '',
    to_state   TEXT    NOT NULL,
    actor      TEXT    NOT NULL DEFAULT '',
    reason     TEXT    NOT NULL DEFAULT '',
    message    TEXT    NOT NULL DEFAULT ''
);

CREATE INDEX events_job_id ON events (job_id, id);

CREATE TABLE tokens (
    id         BIGSERIAL PRIMARY KEY,
    name       TEXT    NOT NULL,
    subject    TEXT    NOT NULL,
    role       TEXT    NOT NULL,
    hash       TEXT    NOT NULL UNIQUE,
    created_at BIGINT,
    expires_at BIGINT,
    revoked_at BIGINT
);
