-- Software environments: every version of every environment. Same conventions
-- as 0001: times are BIGINT Unix nanoseconds in UTC. path_prefix, vars and
-- check_argv are JSON (a list, an object, a list). A version is immutable:
-- only its deprecation may change, once, from 0 to 1; the triggers refuse
-- every other update and every delete.
CREATE TABLE envs (
    name              TEXT    NOT NULL,
    version           INTEGER NOT NULL CHECK (version >= 1),
    image             TEXT    NOT NULL DEFAULT '',
    path_prefix       TEXT    NOT NULL DEFAULT '[]',
    vars              TEXT    NOT NULL DEFAULT '{}',
    check_argv        TEXT    NOT NULL DEFAULT '[]',
    description       TEXT    NOT NULL DEFAULT '',
    digest            TEXT    NOT NULL,
    deprecated        INTEGER NOT NULL DEFAULT 0 CHECK (deprecated IN (0, 1)),
    deprecated_reason TEXT    NOT NULL DEFAULT '',
    deprecated_at     BIGINT,
    created_by        TEXT    NOT NULL DEFAULT '',
    created_at        BIGINT,
    PRIMARY KEY (name, version)
);

CREATE FUNCTION envs_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '%', TG_ARGV[0];
END;
$$;

CREATE TRIGGER envs_definition_immutable
BEFORE UPDATE OF name, version, image, path_prefix, vars, check_argv, description, digest, created_by, created_at ON envs
FOR EACH ROW EXECUTE FUNCTION envs_refuse('environment versions are immutable');

CREATE TRIGGER envs_deprecation_once
BEFORE UPDATE OF deprecated, deprecated_reason, deprecated_at ON envs
FOR EACH ROW WHEN (OLD.deprecated = 1)
EXECUTE FUNCTION envs_refuse('an environment version is deprecated once and for good');

CREATE TRIGGER envs_no_delete
BEFORE DELETE ON envs
FOR EACH ROW EXECUTE FUNCTION envs_refuse('environment versions are never deleted');
