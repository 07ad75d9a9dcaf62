-- jobs.state's CHECK compared the state with a list of seven values, which
-- SQLite evaluates by building a temporary table on every insert and every
-- update of a job's state. The same rule as a chain of comparisons costs no
-- table. The constraint's text is rewritten in place, as SQLite's ALTER
-- TABLE documentation allows for a change that leaves the stored rows as
-- they are; migrate bumps the schema version after a migration that writes
-- sqlite_schema, so every connection reads the new text.
PRAGMA writable_schema = ON;
UPDATE sqlite_schema
SET sql = replace(sql,
    'CHECK (state IN (''queued'', ''held'', ''starting'', ''running'', ''succeeded'', ''failed'', ''canceled''))',
    'CHECK (state = ''queued'' OR state = ''held'' OR state = ''starting'' OR state = ''running'' OR state = ''succeeded'' OR state = ''failed'' OR state = ''canceled'')')
WHERE type = 'table' AND name = 'jobs';
PRAGMA writable_schema = OFF;
