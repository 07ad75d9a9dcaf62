package postgres

import (
	"github.com/jackc/pgx/v5"

	"trainyard/internal/domain"
	"trainyard/internal/store/sqlstore"
)

// JobScanner implements sqlstore.JobListReader, so the shared ListJobs
// decodes its rows with jobListScanner (fastscan.go).
func (sharedReader) JobScanner() func(sqlstore.Row, *domain.Job) error {
	scan := newJobScanner()
	return func(row sqlstore.Row, j *domain.Job) (err error) {
		if rows, ok := row.(pgx.Rows); ok {
			return scan(rows, j)
		}
		*j, err = sqlstore.ScanJob(row, false)
		return err
	}
}

// newJobScanner returns a scanner for the list rows of one query, which
// decodes a row into *j: from its wire bytes when the columns are the ones
// jobListScanner knows, with Scan otherwise.
func newJobScanner() func(rows pgx.Rows, j *domain.Job) error {
	var (
		fast  *jobListScanner
		known bool
	)
	return func(rows pgx.Rows, j *domain.Job) (err error) {
		if !known {
			fast, known = newJobListScanner(rows), true
		}
		if fast != nil {
			*j, err = fast.scan(rows)
		} else {
			*j, err = sqlstore.ScanJob(rows, false)
		}
		return err
	}
}
