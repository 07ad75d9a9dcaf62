-- Storage accrual: the bytes each job held on each tier during one UTC day,
-- times the seconds held. A day is written once, when it is over, and never
-- again (writing it again changes nothing), so restarts never count twice.
CREATE TABLE storage_days (
    day          BIGINT NOT NULL, -- the day's start, Unix nanoseconds
    job_id       BIGINT NOT NULL,
    tier         TEXT    NOT NULL,
    project      TEXT    NOT NULL,
    pool         TEXT    NOT NULL,
    submitter    TEXT    NOT NULL,
    job_name     TEXT    NOT NULL,
    byte_seconds BIGINT NOT NULL,
    PRIMARY KEY (day, job_id, tier)
);
