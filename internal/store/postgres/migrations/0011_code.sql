-- Code packages: the content-addressed source archive a job runs from
-- (submit --context). At most one per job, written with the job; the archive
-- itself lives in the blob store under code/sha256/<hex>.tar.gz.
CREATE TABLE job_code (
    job_id     BIGINT  PRIMARY KEY REFERENCES jobs (id),
    sha256     TEXT    NOT NULL,
    git_commit TEXT    NOT NULL DEFAULT '',
    dirty      INTEGER NOT NULL DEFAULT 0 CHECK (dirty IN (0, 1))
);
-- Which jobs use a package (for garbage collection of unused packages).
CREATE INDEX job_code_sha256 ON job_code (sha256);
