-- Compute requests (R37): a project asks for more of a pool until a date; a
-- lead or resource admin approves or denies. Approved rows are grants.
CREATE TABLE quota_requests (
    id          BIGSERIAL PRIMARY KEY,
    project     TEXT    NOT NULL,
    pool        TEXT    NOT NULL REFERENCES pools (name),
    gpus        BIGINT  NOT NULL DEFAULT 0,
    cpus        DOUBLE PRECISION NOT NULL DEFAULT 0,
    memory      BIGINT  NOT NULL DEFAULT 0,
    jobs        BIGINT  NOT NULL DEFAULT 0,
    until_at    BIGINT  NOT NULL,
    reason      TEXT    NOT NULL DEFAULT '',
    requester   TEXT    NOT NULL,
    state       TEXT    NOT NULL CHECK (state IN ('pending', 'approved', 'denied')),
    decider     TEXT    NOT NULL DEFAULT '',
    decided_at  BIGINT,
    note        TEXT    NOT NULL DEFAULT '',
    created_at  BIGINT  NOT NULL
);

CREATE INDEX quota_requests_grants ON quota_requests (state, until_at);
CREATE INDEX quota_requests_project ON quota_requests (project, pool, id);
