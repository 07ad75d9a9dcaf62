-- The audit log: one row per record, append-only. seq is assigned by the
-- writer holding the audit lock (1, 2, 3, … without gaps); at is BIGINT Unix
-- nanoseconds in UTC. before_json and after_json hold compact JSON
-- summaries ('' for none). prev_hash and hash chain the rows (see package
-- audit): hash covers every other column, so editing, deleting, inserting or
-- reordering rows is detected by `trainyard audit verify`.
CREATE TABLE audit (
    seq         BIGINT  PRIMARY KEY,
    at          BIGINT  NOT NULL,
    actor       TEXT    NOT NULL,
    action      TEXT    NOT NULL,
    target      TEXT    NOT NULL DEFAULT '',
    before_json TEXT    NOT NULL DEFAULT '',
    after_json  TEXT    NOT NULL DEFAULT '',
    result      TEXT    NOT NULL,
    detail      TEXT    NOT NULL DEFAULT '',
    client      TEXT    NOT NULL DEFAULT '',
    prev_hash   TEXT    NOT NULL,
    hash        TEXT    NOT NULL
);

-- No secondary indexes: each would cost every audited write, while listing
-- filters scan in seq order and stop at their limit.
