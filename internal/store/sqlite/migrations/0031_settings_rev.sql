-- The settings revision: every transaction that writes pools, quotas,
-- projects or compute requests (grants) increments it, whoever writes (the
-- server, a migration, another process on the file), so that the control
-- loop reads those tables again only when it changed (store SettingsRev).
-- Triggers rather than the store's code, so that no writer is missed.
-- SQLite has row triggers only: a statement that writes n rows adds n.
CREATE TABLE settings_rev (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    rev INTEGER NOT NULL
);
INSERT INTO settings_rev (id, rev) VALUES (1, 1);

CREATE TRIGGER pools_settings_rev_insert AFTER INSERT ON pools
BEGIN
    UPDATE settings_rev SET rev = rev + 1 WHERE id = 1;
END;

CREATE TRIGGER pools_settings_rev_update AFTER UPDATE ON pools
BEGIN
    UPDATE settings_rev SET rev = rev + 1 WHERE id = 1;
END;

CREATE TRIGGER pools_settings_rev_delete AFTER DELETE ON pools
BEGIN
    UPDATE settings_rev SET rev = rev + 1 WHERE id = 1;
END;

CREATE TRIGGER quotas_settings_rev_insert AFTER INSERT ON quotas
BEGIN
    UPDATE settings_rev SET rev = rev + 1 WHERE id = 1;
END;

CREATE TRIGGER quotas_settings_rev_update AFTER UPDATE ON quotas
BEGIN
    UPDATE settings_rev SET rev = rev + 1 WHERE id = 1;
END;

CREATE TRIGGER quotas_settings_rev_delete AFTER DELETE ON quotas
BEGIN
    UPDATE settings_rev SET rev = rev + 1 WHERE id = 1;
END;

CREATE TRIGGER projects_settings_rev_insert AFTER INSERT ON projects
BEGIN
    UPDATE settings_rev SET rev = rev + 1 WHERE id = 1;
END;

CREATE TRIGGER projects_settings_rev_update AFTER UPDATE ON projects
BEGIN
    UPDATE settings_rev SET rev = rev + 1 WHERE id = 1;
END;

CREATE TRIGGER projects_settings_rev_delete AFTER DELETE ON projects
BEGIN
    UPDATE settings_rev SET rev = rev + 1 WHERE id = 1;
END;

CREATE TRIGGER quota_requests_settings_rev_insert AFTER INSERT ON quota_requests
BEGIN
    UPDATE settings_rev SET rev = rev + 1 WHERE id = 1;
END;

CREATE TRIGGER quota_requests_settings_rev_update AFTER UPDATE ON quota_requests
BEGIN
    UPDATE settings_rev SET rev = rev + 1 WHERE id = 1;
END;

CREATE TRIGGER quota_requests_settings_rev_delete AFTER DELETE ON quota_requests
BEGIN
    UPDATE settings_rev SET rev = rev + 1 WHERE id = 1;
END;
