-- Alerts: each firing of a rule's condition, resolved once. A partial unique
-- index keeps one firing alert per dedupe key.
CREATE TABLE alerts (
    id          BIGSERIAL PRIMARY KEY,
    key         TEXT    NOT NULL,
    rule        TEXT    NOT NULL,
    severity    TEXT    NOT NULL,
    state       TEXT    NOT NULL CHECK (state IN ('firing', 'resolved')),
    summary     TEXT    NOT NULL,
    resolution  TEXT    NOT NULL DEFAULT '',
    job_id      BIGINT  NOT NULL DEFAULT 0,
    job_name    TEXT    NOT NULL DEFAULT '',
    attempt     INTEGER NOT NULL DEFAULT 0,
    project     TEXT    NOT NULL DEFAULT '',
    pool        TEXT    NOT NULL DEFAULT '',
    owner       TEXT    NOT NULL DEFAULT '',
    fired_at    BIGINT  NOT NULL,
    resolved_at BIGINT
);
CREATE UNIQUE INDEX alerts_firing_key ON alerts (key) WHERE state = 'firing';
CREATE INDEX alerts_job ON alerts (job_id);

-- The notification outbox: one row per (alert, channel, transition).
CREATE TABLE alert_notifications (
    id         BIGSERIAL PRIMARY KEY,
    alert_id   BIGINT  NOT NULL REFERENCES alerts (id),
    channel    TEXT    NOT NULL,
    status     TEXT    NOT NULL CHECK (status IN ('firing', 'resolved')),
    created_at BIGINT  NOT NULL,
    sent_at    BIGINT,
    tries      INTEGER NOT NULL DEFAULT 0,
    last_error TEXT    NOT NULL DEFAULT '',
    gave_up    INTEGER NOT NULL DEFAULT 0,
    UNIQUE (alert_id, channel, status)
);
CREATE INDEX alert_notifications_pending ON alert_notifications (id) WHERE sent_at IS NULL AND gave_up = 0;
