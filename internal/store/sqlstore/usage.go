package sqlstore

import (
	"context"
	"strconv"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// qRecentUsage walks the submitter's jobs of one name from the newest
// down, on (submitter, name, id), bounded below by the oldest of the
// submitter's newest DuplicateScan ids, and stops at UsageRuns succeeded
// attempts.
var qRecentUsage = Q(`SELECT j.id, j.req_gpus, j.req_cpus, j.req_memory, j.req_nodes, a.started_at, a.finished_at, a.cpu_seconds, a.max_rss
	FROM jobs j JOIN attempts a ON a.job_id = j.id
	WHERE j.submitter = ? AND j.name = ? AND a.state = ? AND a.started_at IS NOT NULL AND a.finished_at > a.started_at
	AND j.id >= (SELECT COALESCE(MIN(id), 0) FROM (SELECT id FROM jobs WHERE submitter = ? ORDER BY id DESC LIMIT ` + strconv.Itoa(store.DuplicateScan) + `) AS newest)
	ORDER BY j.id DESC, a.number DESC LIMIT ` + strconv.Itoa(store.UsageRuns))

// RecentUsage implements store.Jobs.
func (s Shared) RecentUsage(ctx context.Context, submitter, name string) ([]store.RunUsage, error) {
	return queryAll(ctx, s, "read recent usage", func(row Row) (store.RunUsage, error) {
		var (
			u                      store.RunUsage
			gpus, memory, nodes    int64
			started, finished, rss int64
		)
		err := row.Scan(&u.JobID, &gpus, &u.Request.CPUs, &memory, &nodes, &started, &finished, &u.CPUSeconds, &rss)
		u.Request.GPUs, u.Request.Memory, u.Request.Nodes = int(gpus), domain.ByteSize(memory), int(nodes)
		u.Ran, u.MaxRSS = time.Duration(finished-started), domain.ByteSize(rss)
		return u, err
	}, qRecentUsage, submitter, name, string(domain.AttemptSucceeded), submitter)
}
