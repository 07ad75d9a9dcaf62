-- Compute requests (R37): a project asks for more of a pool until a date; a
-- lead or resource admin approves or denies. Approved rows are grants.
CREATE TABLE quota_requests (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    project     TEXT    NOT NULL,
    pool        TEXT    NOT NULL REFERENCES pools (name),
    gpus        INTEGER NOT NULL DEFAULT 0,
    cpus        REAL    NOT NULL DEFAULT 0,
    memory      INTEGER NOT NULL DEFAULT 0,
    jobs        INTEGER NOT NULL DEFAULT 0,
    until_at    INTEGER NOT NULL,
    reason      TEXT    NOT NULL DEFAULT '',
    requester   TEXT    NOT NULL,
    state       TEXT    NOT NULL CHECK (state IN ('pending', 'approved', 'denied')),
    decider     TEXT    NOT NULL DEFAULT '',
    decided_at  INTEGER,
    note        TEXT    NOT NULL DEFAULT '',
    created_at  INTEGER NOT NULL
);

CREATE INDEX quota_requests_grants ON quota_requests (state, until_at);
CREATE INDEX quota_requests_project ON quota_requests (project, pool, id);
