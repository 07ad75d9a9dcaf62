-- Job templates: every version of every template. Same conventions as 0001:
-- times are BIGINT Unix nanoseconds in UTC. Versions are immutable; body is
-- the template document as written and hash its "sha256:<hex>".
CREATE TABLE templates (
    project    TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    version    INTEGER NOT NULL CHECK (version >= 1),
    body       BYTEA   NOT NULL,
    hash       TEXT    NOT NULL,
    created_by TEXT    NOT NULL DEFAULT '',
    created_at BIGINT,
    PRIMARY KEY (project, name, version)
);
