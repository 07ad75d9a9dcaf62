-- Users and the roles they hold. Same conventions as 0001: times are BIGINT
-- Unix nanoseconds in UTC (NULL for the zero time).

CREATE TABLE users (
    name       TEXT PRIMARY KEY,
    created_at BIGINT
);

-- project is '' for the global roles (admin, resource-admin, auditor).
CREATE TABLE role_bindings (
    user_name  TEXT    NOT NULL REFERENCES users (name),
    project    TEXT    NOT NULL DEFAULT '',
    role       TEXT    NOT NULL,
    created_at BIGINT,
    PRIMARY KEY (user_name, project, role)
);

CREATE INDEX tokens_subject ON tokens (subject, id);

-- Tokens made before users existed (the bootstrap token) become users that
-- hold their token's role.
INSERT INTO users (name, created_at)
    SELECT subject, MIN(created_at) FROM tokens WHERE subject NOT LIKE 'job:%' GROUP BY subject;

INSERT INTO role_bindings (user_name, project, role, created_at)
    SELECT subject, '', role, MIN(created_at) FROM tokens
    WHERE subject NOT LIKE 'job:%' AND role IN ('admin', 'resource-admin', 'auditor')
    GROUP BY subject, role
    ON CONFLICT DO NOTHING;

-- Listing the jobs a member may see filters by submitter.
CREATE INDEX jobs_submitter_id ON jobs (submitter, id);
