-- Review reports read the history by the hour, not by the attempt: each
-- attempt, as it ends, adds to the hours it held resources in, keyed by
-- its job's project, pool and request and by how it ended, so
-- a month's report reads a few thousand rows however many attempts ran.
-- hour is the hour's start (Unix ns); started counts the attempts that
-- started in it, spent those of them that held resources for some time,
-- carried those held across its start, ended those that ended in
-- (hour, hour + 1h], with the CPU and GPU seconds they used; held_us is
-- the time held inside the hour, each end counted in whole microseconds.
CREATE TABLE usage_hours (
    hour        BIGINT NOT NULL,
    project     TEXT    NOT NULL,
    pool        TEXT    NOT NULL,
    req_gpus    BIGINT NOT NULL,
    req_cpus    DOUBLE PRECISION NOT NULL,
    req_memory  BIGINT NOT NULL,
    req_nodes   BIGINT NOT NULL,
    state       TEXT    NOT NULL,
    reason      TEXT    NOT NULL,
    started     BIGINT NOT NULL,
    spent       BIGINT NOT NULL,
    carried     BIGINT NOT NULL,
    ended       BIGINT NOT NULL,
    held_us     BIGINT NOT NULL,
    cpu_seconds DOUBLE PRECISION NOT NULL,
    gpu_seconds DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (hour, project, pool, req_gpus, req_cpus, req_memory, req_nodes, state, reason)
);

-- What a job's ended attempts held and used, for the right-sizing lists:
-- usage_at is when the latest of them ended.
ALTER TABLE jobs ADD COLUMN used_cpu_seconds DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN used_gpu_seconds DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN held_us BIGINT NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN peak_rss BIGINT NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN usage_at BIGINT;
CREATE INDEX jobs_usage_at ON jobs (usage_at);

-- The history so far, as the store adds each attempt from now on.
WITH RECURSIVE x (job_id, number, hour) AS (
SELECT a.job_id, a.number, (CASE WHEN a.finished_at > a.started_at THEN a.started_at ELSE a.finished_at - 1 END) - (CASE WHEN a.finished_at > a.started_at THEN a.started_at ELSE a.finished_at - 1 END) % 3600000000000 FROM attempts a
WHERE a.started_at IS NOT NULL AND a.finished_at IS NOT NULL AND 1 = 1
UNION ALL
SELECT x.job_id, x.number, x.hour + 3600000000000 FROM x JOIN attempts a ON a.job_id = x.job_id AND a.number = x.number
WHERE x.hour + 3600000000000 < a.finished_at)
INSERT INTO usage_hours (hour, project, pool, req_gpus, req_cpus, req_memory, req_nodes, state, reason,
started, spent, carried, ended, held_us, cpu_seconds, gpu_seconds)
SELECT x.hour, j.project, j.pool, j.req_gpus, j.req_cpus, j.req_memory, j.req_nodes, a.state, a.reason,
SUM(CASE WHEN a.started_at >= x.hour AND a.started_at < x.hour + 3600000000000 THEN 1 ELSE 0 END),
SUM(CASE WHEN a.started_at >= x.hour AND a.started_at < x.hour + 3600000000000 AND a.finished_at > a.started_at THEN 1 ELSE 0 END),
SUM(CASE WHEN a.started_at < x.hour THEN 1 ELSE 0 END),
SUM(CASE WHEN a.finished_at > x.hour AND a.finished_at <= x.hour + 3600000000000 THEN 1 ELSE 0 END),
SUM((CASE WHEN a.finished_at < x.hour + 3600000000000 THEN a.finished_at ELSE x.hour + 3600000000000 END) / 1000
- (CASE WHEN a.started_at > x.hour THEN a.started_at ELSE x.hour END) / 1000),
SUM(CASE WHEN a.finished_at > x.hour AND a.finished_at <= x.hour + 3600000000000 THEN a.cpu_seconds ELSE 0 END),
SUM(CASE WHEN a.finished_at > x.hour AND a.finished_at <= x.hour + 3600000000000 THEN a.gpu_seconds ELSE 0 END)
FROM x JOIN attempts a ON a.job_id = x.job_id AND a.number = x.number JOIN jobs j ON j.id = a.job_id
WHERE 1 = 1
GROUP BY x.hour, j.project, j.pool, j.req_gpus, j.req_cpus, j.req_memory, j.req_nodes, a.state, a.reason
ON CONFLICT (hour, project, pool, req_gpus, req_cpus, req_memory, req_nodes, state, reason) DO UPDATE SET
started = usage_hours.started + excluded.started, spent = usage_hours.spent + excluded.spent,
carried = usage_hours.carried + excluded.carried, ended = usage_hours.ended + excluded.ended,
held_us = usage_hours.held_us + excluded.held_us, cpu_seconds = usage_hours.cpu_seconds + excluded.cpu_seconds,
gpu_seconds = usage_hours.gpu_seconds + excluded.gpu_seconds;
UPDATE jobs SET used_cpu_seconds = u.cpu, used_gpu_seconds = u.gpu, held_us = u.us, peak_rss = u.rss, usage_at = u.at
FROM (SELECT a.job_id AS job_id, SUM(a.cpu_seconds) AS cpu, SUM(a.gpu_seconds) AS gpu,
SUM(a.finished_at / 1000 - a.started_at / 1000) AS us, MAX(a.max_rss) AS rss, MAX(a.finished_at) AS at
FROM attempts a WHERE a.started_at IS NOT NULL AND a.finished_at IS NOT NULL GROUP BY a.job_id) AS u
WHERE jobs.id = u.job_id;
