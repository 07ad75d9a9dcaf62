package postgres

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"trainyard/internal/domain"
	"trainyard/internal/store/sqlstore"
)

// A job's code package lives in its own table (migration 0011), one row per
// job that has one, so the jobs row and its hot queries stay as they are.
var jobCodeSQL = sqlstore.QJobCode.SQL(sqlstore.Postgres)

// jobCodeIn reads the code package of job id inside a write (nil: none).
func (w *writer) jobCodeIn(id int64) (*domain.CodeRef, error) {
	return scanCode(w.queryRow(jobCodeSQL, id), id)
}

func scanCode(row rowScanner, id int64) (*domain.CodeRef, error) {
	var (
		c     domain.CodeRef
		dirty int32
	)
	err := row.Scan(&c.SHA256, &c.Commit, &dirty)
	if errors.Is(err, pgx.ErrNoRows) {
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
