-- Workflows: sweeps (and job arrays) whose members are jobs, and the
-- dependencies (a spec's after:) a held job waits for.
CREATE TABLE sweeps (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    name         TEXT    NOT NULL,
    project      TEXT    NOT NULL,
    submitter    TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    method       TEXT    NOT NULL,
    members      INTEGER NOT NULL DEFAULT 0,
    max_parallel INTEGER NOT NULL DEFAULT 0,
    spec_json    TEXT    NOT NULL,
    canceled_at  INTEGER,
    canceled_by  TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX sweeps_project ON sweeps (project, id);
-- A member's sweep; NULL for every other job.
ALTER TABLE jobs ADD COLUMN sweep_id INTEGER;
CREATE INDEX jobs_sweep ON jobs (sweep_id, state, id) WHERE sweep_id IS NOT NULL;
-- One row per entry of a job's after:, kept after it is met (lineage).
CREATE TABLE job_waits (
    job_id   INTEGER NOT NULL,
    on_job   INTEGER NOT NULL DEFAULT 0,
    on_sweep INTEGER NOT NULL DEFAULT 0,
    on_cond  TEXT    NOT NULL
);
CREATE INDEX job_waits_job ON job_waits (job_id);
CREATE INDEX job_waits_on_job ON job_waits (on_job) WHERE on_job <> 0;
CREATE INDEX job_waits_on_sweep ON job_waits (on_sweep) WHERE on_sweep <> 0;
