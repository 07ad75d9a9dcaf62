-- A job token lives as long as its attempt: it is deleted when the attempt
-- ends (the audit log keeps its issue and its end). Tokens of attempts that
-- ended before, kept revoked, go too.
DELETE FROM tokens WHERE role = 'job' AND revoked_at IS NOT NULL;
