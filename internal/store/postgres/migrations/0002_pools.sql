-- Pools, quotas and projects. Same conventions as 0001: times are BIGINT
-- Unix nanoseconds in UTC (NULL for the zero time), booleans are 0/1
-- integers, sizes are integer bytes, durations integer nanoseconds.

-- A pool's nodes are a JSON array of {name, cpus, memory, gpus}; priorities
-- are comma-separated class names ('' accepts every class).
CREATE TABLE pools (
    name              TEXT    PRIMARY KEY,
    executor          TEXT    NOT NULL DEFAULT '',
    gpu_type          TEXT    NOT NULL DEFAULT '',
    nodes_json        TEXT    NOT NULL DEFAULT '[]',
    max_gpus_per_job  BIGINT  NOT NULL DEFAULT 0,
    max_nodes_per_job BIGINT  NOT NULL DEFAULT 0,
    max_timeout       BIGINT  NOT NULL DEFAULT 0,
    max_running       BIGINT  NOT NULL DEFAULT 0,
    priorities        TEXT    NOT NULL DEFAULT '',
    borrowing         INTEGER NOT NULL DEFAULT 0 CHECK (borrowing IN (0, 1)),
    preemption        INTEGER NOT NULL DEFAULT 0 CHECK (preemption IN (0, 1)),
    created_at        BIGINT,
    updated_at        BIGINT
);

CREATE TABLE quotas (
    project       TEXT    NOT NULL,
    pool          TEXT    NOT NULL REFERENCES pools (name),
    gpus          BIGINT  NOT NULL DEFAULT 0,
    cpus          DOUBLE PRECISION NOT NULL DEFAULT 0,
    memory        BIGINT  NOT NULL DEFAULT 0,
    jobs          BIGINT  NOT NULL DEFAULT 0,
    borrow_gpus   BIGINT  NOT NULL DEFAULT 0,
    borrow_cpus   DOUBLE PRECISION NOT NULL DEFAULT 0,
    borrow_memory BIGINT  NOT NULL DEFAULT 0,
    borrow_jobs   BIGINT  NOT NULL DEFAULT 0,
    max_priority  TEXT    NOT NULL DEFAULT '',
    updated_at    BIGINT,
    PRIMARY KEY (project, pool)
);

CREATE INDEX quotas_pool ON quotas (pool, project);

CREATE TABLE projects (
    name       TEXT PRIMARY KEY,
    shares     DOUBLE PRECISION NOT NULL DEFAULT 1 CHECK (shares > 0),
    created_at BIGINT
);
