package sqlite

import (
	"database/sql"
	"errors"
	"fmt"

	"trainyard/internal/domain"
	"trainyard/internal/store/sqlstore"
)

// A job's code package lives in its own table (migration 0011), one row per
// job that has one, so the jobs row and its hot queries stay as they are.
const insertJobCodeSQL = `INSERT INTO job_code (job_id, sha256, git_commit, dirty) VALUES (?, ?, ?, ?)`

// jobCodeSQL reads a job's code package inside a write.
var jobCodeSQL = sqlstore.QJobCode.SQL(sqlstore.SQLite)

// insertJobCode records the code package of the new job id, in the job's
// transaction; nil records nothing.
func (w *writer) insertJobCode(id int64, c *domain.CodeRef) error {
	if c == nil {
		return nil
	}
	if _, err := w.exec(insertJobCodeSQL, id, c.SHA256, c.Commit, boolArg(c.Dirty)); err != nil {
		return interpretError("create job: record code package", err)
	}
	return nil
}

// jobCodeIn reads the code package of job id inside a write (nil: none).
func (w *writer) jobCodeIn(id int64) (*domain.CodeRef, error) {
	return scanCode(w.queryRow(jobCodeSQL, id), id)
}

func scanCode(row *sql.Row, id int64) (*domain.CodeRef, error) {
	var (
		c     domain.CodeRef
		dirty int64
	)
	err := row.Scan(&c.SHA256, &c.Commit, &dirty)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, interpretError(fmt.Sprintf("get code package of job %d", id), err)
	}
	c.Dirty = dirty != 0
	return &c, nil
}

// cloneCode copies c so the returned job does not share the caller's struct.
func cloneCode(c *domain.CodeRef) *domain.CodeRef {
	if c == nil {
		return nil
	}
	cp := *c
	return &cp
}
