-- Spend and review reports read every attempt of a window in job order;
-- this index holds all they read, so the read walks it alone, in order,
-- however the attempts of different jobs were interleaved when written.
CREATE INDEX attempts_history ON attempts (job_id, started_at, finished_at, state, cpu_seconds, max_rss, gpu_seconds);
