package sqlite

import (
	"context"
	"strings"
	"testing"

	"trainyard/internal/domain"
)

// TestTimeIndexesSkipNewJobs: the indexes on the start and usage times
// are partial (migration 0033), so a new job, which has neither, adds no
// entry to them, and the reports' window reads, comparing the time with
// bounds, still use them.
func TestTimeIndexesSkipNewJobs(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	if _, _, err := s.CreateJob(ctx, testNewJob(t, "a"), domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}); err != nil {
		t.Fatal(err)
	}
	for index, where := range map[string]string{
		"jobs_started_at": "j.started_at >= ? AND j.started_at < ?",
		"jobs_usage_at":   "j.usage_at > ? AND j.usage_at <= ?",
	} {
		var partial int
		if err := s.readDB.QueryRowContext(ctx, `SELECT partial FROM pragma_index_list('jobs') WHERE name = ?`, index).Scan(&partial); err != nil {
			t.Fatal(err)
		}
		if partial != 1 {
			t.Errorf("index %s is not partial: it takes an entry for every new job", index)
		}
		rows, err := s.readDB.QueryContext(ctx, `EXPLAIN QUERY PLAN SELECT j.id FROM jobs j WHERE `+where, 1, 2)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		if got := strings.Join(plan, "; "); !strings.Contains(got, "INDEX "+index+" ") {
			t.Errorf("WHERE %s: plan %q does not use %s", where, got, index)
		}
	}
}
