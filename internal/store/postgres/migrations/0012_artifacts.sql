-- Manifests: what a job's output directory held when each attempt ended,
-- with the lineage that produced it, and the files listed in it.
CREATE TABLE manifests (
    job_id  BIGINT  NOT NULL REFERENCES jobs (id),
    attempt INTEGER NOT NULL,
    at      BIGINT  NOT NULL,
    lineage TEXT    NOT NULL,
    PRIMARY KEY (job_id, attempt)
);
CREATE TABLE manifest_files (
    job_id  BIGINT  NOT NULL,
    attempt INTEGER NOT NULL,
    path    TEXT    NOT NULL,
    size    BIGINT  NOT NULL,
    sha256  TEXT    NOT NULL,
    PRIMARY KEY (job_id, attempt, path)
);

-- Complete checkpoints, registered by the control loop or an API call.
CREATE TABLE checkpoints (
    job_id     BIGINT  NOT NULL REFERENCES jobs (id),
    name       TEXT    NOT NULL,
    attempt    INTEGER NOT NULL,
    path       TEXT    NOT NULL,
    size       BIGINT  NOT NULL,
    files      BIGINT  NOT NULL,
    at         BIGINT  NOT NULL,
    deleted_at BIGINT,
    PRIMARY KEY (job_id, name)
);
