-- The audit log: one row per record, append-only. seq is assigned by the
-- single writer (1, 2, 3, … without gaps); at is integer Unix nanoseconds in
-- UTC. before_json and after_json hold compact JSON summaries ('' for none).
-- prev_hash and hash chain the rows (see package audit): hash covers every
-- other column, so editing, deleting, inserting or reordering rows is
-- detected by `trainyard audit verify`.
CREATE TABLE audit (
    seq         INTEGER PRIMARY KEY,
    at          INTEGER NOT NULL,
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

-- Filters of `trainyard audit ls`: each index ends in seq so results come
-- out in log order without a sort.
CREATE INDEX audit_by_actor  ON audit (actor, seq);
CREATE INDEX audit_by_action ON audit (action, seq);
CREATE INDEX audit_by_target ON audit (target, seq);
CREATE INDEX audit_by_at     ON audit (at);
