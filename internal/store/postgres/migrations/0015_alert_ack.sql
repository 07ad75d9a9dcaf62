-- Acknowledged alerts: who acknowledged a firing alert, when and why. An
-- acknowledged alert is not notified again.
ALTER TABLE alerts ADD COLUMN acked_at BIGINT;
ALTER TABLE alerts ADD COLUMN acked_by TEXT NOT NULL DEFAULT '';
ALTER TABLE alerts ADD COLUMN ack_reason TEXT NOT NULL DEFAULT '';
