-- The settings revision: every transaction that writes pools, quotas,
-- projects or compute requests (grants) increments it, whoever writes (any
-- replica, a migration, a command run on the database), so that the control
-- loop of each replica reads those tables again only when it changed (store
-- SettingsRev). Triggers rather than the store's code, so that no writer is
-- missed. They are deferred to the commit, so the row lock they take on
-- settings_rev is the transaction's last and is held only while it commits:
-- writers of settings queue there briefly, in commit order, and no lock
-- order can deadlock through it. The revision becomes visible with the
-- rows it stands for.
CREATE TABLE settings_rev (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    rev BIGINT  NOT NULL
);
INSERT INTO settings_rev (id, rev) VALUES (1, 1);

CREATE FUNCTION settings_rev_bump() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE settings_rev SET rev = rev + 1 WHERE id = 1;
    RETURN NULL;
END;
$$;

CREATE CONSTRAINT TRIGGER pools_settings_rev AFTER INSERT OR UPDATE OR DELETE ON pools
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION settings_rev_bump();
CREATE TRIGGER pools_settings_rev_truncate AFTER TRUNCATE ON pools
    FOR EACH STATEMENT EXECUTE FUNCTION settings_rev_bump();

CREATE CONSTRAINT TRIGGER quotas_settings_rev AFTER INSERT OR UPDATE OR DELETE ON quotas
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION settings_rev_bump();
CREATE TRIGGER quotas_settings_rev_truncate AFTER TRUNCATE ON quotas
    FOR EACH STATEMENT EXECUTE FUNCTION settings_rev_bump();

CREATE CONSTRAINT TRIGGER projects_settings_rev AFTER INSERT OR UPDATE OR DELETE ON projects
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION settings_rev_bump();
CREATE TRIGGER projects_settings_rev_truncate AFTER TRUNCATE ON projects
    FOR EACH STATEMENT EXECUTE FUNCTION settings_rev_bump();

CREATE CONSTRAINT TRIGGER quota_requests_settings_rev AFTER INSERT OR UPDATE OR DELETE ON quota_requests
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION settings_rev_bump();
CREATE TRIGGER quota_requests_settings_rev_truncate AFTER TRUNCATE ON quota_requests
    FOR EACH STATEMENT EXECUTE FUNCTION settings_rev_bump();
