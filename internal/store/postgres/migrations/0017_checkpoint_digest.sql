-- A checkpoint's content digest when it was registered (hex SHA-256; ''
-- for those registered before digests were kept), the latest attempt handed
-- it to resume from (0: none), and why resuming skips it ('': it does not).
ALTER TABLE checkpoints ADD COLUMN sha256 TEXT NOT NULL DEFAULT '';
ALTER TABLE checkpoints ADD COLUMN resumed_by INTEGER NOT NULL DEFAULT 0;
ALTER TABLE checkpoints ADD COLUMN suspect TEXT NOT NULL DEFAULT '';
