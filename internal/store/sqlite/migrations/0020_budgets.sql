-- A project's money budget (domain.Budget): amount in micros of the
-- server's currency, every month or once from start_at to end_at
-- (Unix nanoseconds; NULL for a monthly one), alert thresholds as a JSON
-- array of percentages, and the action at 100%.
CREATE TABLE budgets (
    project     TEXT PRIMARY KEY,
    amount      INTEGER NOT NULL,
    period      TEXT NOT NULL DEFAULT '',
    start_at    INTEGER,
    end_at      INTEGER,
    thresholds  TEXT NOT NULL DEFAULT '[]',
    action      TEXT NOT NULL,
    updated_at  INTEGER NOT NULL
);
