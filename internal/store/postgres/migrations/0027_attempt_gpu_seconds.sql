-- How much of its GPUs an attempt used (utilisation-weighted GPU-seconds,
-- from the sampler), recorded when it ends: the used GPU-hours of reviews.
ALTER TABLE attempts ADD COLUMN gpu_seconds DOUBLE PRECISION NOT NULL DEFAULT 0;
