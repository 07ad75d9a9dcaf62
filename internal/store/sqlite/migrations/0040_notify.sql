-- Job-end notifications (#22): users' defaults, the job ends not yet
-- worked out (written with the job's move to an end state) and the
-- notifications they owe, one per job and target.
CREATE TABLE notify_prefs (
    username   TEXT    PRIMARY KEY,
    notify     TEXT    NOT NULL, -- JSON of domain.Notify
    updated_at INTEGER NOT NULL
);
CREATE TABLE job_ends (
    job_id INTEGER PRIMARY KEY REFERENCES jobs (id),
    state  TEXT    NOT NULL,
    at     INTEGER NOT NULL
);
CREATE TABLE job_notifications (
    id         INTEGER PRIMARY KEY,
    job_id     INTEGER NOT NULL REFERENCES jobs (id),
    state      TEXT    NOT NULL,
    target     TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    sent_at    INTEGER,
    tries      INTEGER NOT NULL DEFAULT 0,
    last_error TEXT    NOT NULL DEFAULT '',
    gave_up    INTEGER NOT NULL DEFAULT 0,
    UNIQUE (job_id, target)
);
CREATE INDEX job_notifications_pending ON job_notifications (id) WHERE sent_at IS NULL AND gave_up = 0;
