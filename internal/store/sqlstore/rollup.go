package sqlstore

import (
	"context"
	"strconv"
	"time"
)

// hourNS is the width of a usage_hours row, in the nanoseconds of the
// store's times.
const hourNS = int64(time.Hour)

// rollupSQL adds the attempts that filter selects (ended ones, with a
// start) to usage_hours: one row per hour each held resources in, from
// the hour of its start (of its end, for one that ended as it started)
// to the hour its end falls in, (hour, hour + 1h]. The time held inside
// an hour counts each end in whole microseconds, so the hours of an
// attempt sum to its whole time exactly.
func rollupSQL(filter string) string {
	h := strconv.FormatInt(hourNS, 10)
	first := `(CASE WHEN a.finished_at > a.started_at THEN a.started_at ELSE a.finished_at - 1 END)`
	in := func(t string) string { return t + ` >= x.hour AND ` + t + ` < x.hour + ` + h }
	endedIn := `a.finished_at > x.hour AND a.finished_at <= x.hour + ` + h
	return `WITH RECURSIVE x (job_id, number, hour) AS (
		SELECT a.job_id, a.number, ` + first + ` - ` + first + ` % ` + h + ` FROM attempts a
		WHERE a.started_at IS NOT NULL AND a.finished_at IS NOT NULL AND ` + filter + `
		UNION ALL
		SELECT x.job_id, x.number, x.hour + ` + h + ` FROM x JOIN attempts a ON a.job_id = x.job_id AND a.number = x.number
		WHERE x.hour + ` + h + ` < a.finished_at)
	INSERT INTO usage_hours (hour, project, pool, req_gpus, req_cpus, req_memory, req_nodes, state, reason,
		started, spent, carried, ended, held_us, cpu_seconds, gpu_seconds)
	SELECT x.hour, j.project, j.pool, j.req_gpus, j.req_cpus, j.req_memory, j.req_nodes, a.state, a.reason,
		SUM(CASE WHEN ` + in(`a.started_at`) + ` THEN 1 ELSE 0 END),
		SUM(CASE WHEN ` + in(`a.started_at`) + ` AND a.finished_at > a.started_at THEN 1 ELSE 0 END),
		SUM(CASE WHEN a.started_at < x.hour THEN 1 ELSE 0 END),
		SUM(CASE WHEN ` + endedIn + ` THEN 1 ELSE 0 END),
		SUM((CASE WHEN a.finished_at < x.hour + ` + h + ` THEN a.finished_at ELSE x.hour + ` + h + ` END) / 1000
			- (CASE WHEN a.started_at > x.hour THEN a.started_at ELSE x.hour END) / 1000),
		SUM(CASE WHEN ` + endedIn + ` THEN a.cpu_seconds ELSE 0 END),
		SUM(CASE WHEN ` + endedIn + ` THEN a.gpu_seconds ELSE 0 END)
	FROM x JOIN attempts a ON a.job_id = x.job_id AND a.number = x.number JOIN jobs j ON j.id = a.job_id
	WHERE 1 = 1
	GROUP BY x.hour, j.project, j.pool, j.req_gpus, j.req_cpus, j.req_memory, j.req_nodes, a.state, a.reason
	ON CONFLICT (hour, project, pool, req_gpus, req_cpus, req_memory, req_nodes, state, reason) DO UPDATE SET
		started = usage_hours.started + excluded.started, spent = usage_hours.spent + excluded.spent,
		carried = usage_hours.carried + excluded.carried, ended = usage_hours.ended + excluded.ended,
		held_us = usage_hours.held_us + excluded.held_us, cpu_seconds = usage_hours.cpu_seconds + excluded.cpu_seconds,
		gpu_seconds = usage_hours.gpu_seconds + excluded.gpu_seconds`
}

var (
	// qRollupAttempt adds one attempt that just ended to usage_hours.
	qRollupAttempt = Q(rollupSQL(`a.job_id = ? AND a.number = ?`))
	// qJobUsage adds it to its job's totals.
	qJobUsage = Q(`UPDATE jobs SET used_cpu_seconds = jobs.used_cpu_seconds + a.cpu_seconds,
		used_gpu_seconds = jobs.used_gpu_seconds + a.gpu_seconds,
		held_us = jobs.held_us + (a.finished_at / 1000 - a.started_at / 1000),
		peak_rss = CASE WHEN a.max_rss > jobs.peak_rss THEN a.max_rss ELSE jobs.peak_rss END,
		usage_at = a.finished_at
		FROM attempts a WHERE a.job_id = ? AND a.number = ? AND a.started_at IS NOT NULL AND a.finished_at IS NOT NULL
		AND jobs.id = a.job_id`)
)

// rebuildUsage holds the statements that derive usage_hours and the jobs'
// totals from every ended attempt (the migration that added them runs
// the same).
var rebuildUsage = []Query{
	Q(`DELETE FROM usage_hours`),
	Q(rollupSQL(`1 = 1`)),
	Q(`UPDATE jobs SET used_cpu_seconds = 0, used_gpu_seconds = 0, held_us = 0, peak_rss = 0, usage_at = NULL`),
	Q(`UPDATE jobs SET used_cpu_seconds = u.cpu, used_gpu_seconds = u.gpu, held_us = u.us, peak_rss = u.rss, usage_at = u.at
		FROM (SELECT a.job_id AS job_id, SUM(a.cpu_seconds) AS cpu, SUM(a.gpu_seconds) AS gpu,
			SUM(a.finished_at / 1000 - a.started_at / 1000) AS us, MAX(a.max_rss) AS rss, MAX(a.finished_at) AS at
			FROM attempts a WHERE a.started_at IS NOT NULL AND a.finished_at IS NOT NULL GROUP BY a.job_id) AS u
		WHERE jobs.id = u.job_id`),
}

// RebuildUsage derives the hourly usage and the jobs' usage totals again
// from every ended attempt, in one write: for history written around the
// store (benchmarks seed attempts so).
func (s Shared) RebuildUsage(ctx context.Context) error {
	return s.b.Write(ctx, func(x Exec) error {
		for _, q := range rebuildUsage {
			if _, err := x.Exec(q); err != nil {
				return s.err("rebuild the hourly usage", err)
			}
		}
		return nil
	})
}

// RebuildUsageSQL is the text of RebuildUsage's statements for engine e,
// as its migration holds them.
func RebuildUsageSQL(e Engine) []string {
	out := make([]string, len(rebuildUsage))
	for i, q := range rebuildUsage {
		out[i] = q.SQL(e)
	}
	return out
}
