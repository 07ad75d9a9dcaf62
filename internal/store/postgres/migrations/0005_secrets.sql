-- Secrets: every version of every secret, sealed. Same conventions as 0001:
-- times are BIGINT Unix nanoseconds in UTC. project is '' for a global
-- secret. The value is never stored in the clear: nonce and ciphertext are
-- AES-256-GCM output under the master key named by key_id, bound to
-- (project, name, version).
CREATE TABLE secrets (
    project    TEXT    NOT NULL DEFAULT '',
    name       TEXT    NOT NULL,
    version    INTEGER NOT NULL CHECK (version >= 1),
    key_id     TEXT    NOT NULL,
    nonce      BYTEA   NOT NULL,
    ciphertext BYTEA   NOT NULL,
    created_by TEXT    NOT NULL DEFAULT '',
    created_at BIGINT,
    PRIMARY KEY (project, name, version)
);
