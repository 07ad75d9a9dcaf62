-- Pools, quotas and projects. Same conventions as 0001: times are integer
-- Unix nanoseconds in UTC (NULL for the zero time), booleans are 0/1
-- integers, sizes are integer bytes, durations integer nanoseconds.

-- A pool's nodes are a JSON array of {name, cpus, memory, gpus}; priorities
-- are comma-separated class names ('' accepts every class).
CREATE TABLE pools (
    name              TEXT    PRIMARY KEY,
    executor          TEXT    NOT NULL DEFAULT '',
    gpu_type          TEXT    NOT NULL DEFAULT '',
    nodes_json        TEXT    NOT NULL DEFAULT '[]',
    max_gpus_per_job  INTEGER NOT NULL DEFAULT 0,
    max_nodes_per_job INTEGER NOT NULL DEFAULT 0,
    max_timeout       INTEGER NOT NULL DEFAULT 0,
    max_running       INTEGER NOT NULL DEFAULT 0,
    priorities        TEXT    NOT NULL DEFAULT '',
    borrowing         INTEGER NOT NULL DEFAULT 0 CHECK (borrowing IN (0, 1)),
    preemption        INTEGER NOT NULL DEFAULT 0 CHECK (preemption IN (0, 1)),
    created_at        INTEGER,
    updated_at        INTEGER
);

CREATE TABLE quotas (
    project       TEXT    NOT NULL,
    pool          TEXT    NOT NULL REFERENCES pools (name),
    gpus          INTEGER NOT NULL DEFAULT 0,
    cpus          REAL    NOT NULL DEFAULT 0,
    memory        INTEGER NOT NULL DEFAULT 0,
    jobs          INTEGER NOT NULL DEFAULT 0,
    borrow_gpus   INTEGER NOT NULL DEFAULT 0,
    borrow_cpus   REAL    NOT NULL DEFAULT 0,
    borrow_memory INTEGER NOT NULL DEFAULT 0,
    borrow_jobs   INTEGER NOT NULL DEFAULT 0,
    max_priority  TEXT    NOT NULL DEFAULT '',
    updated_at    INTEGER,
    PRIMARY KEY (project, pool)
);

CREATE INDEX quotas_pool ON quotas (pool, project);

CREATE TABLE projects (
    name       TEXT PRIMARY KEY,
    shares     REAL NOT NULL DEFAULT 1 CHECK (shares > 0),
    created_at INTEGER
);
