package postgres

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"trainyard/internal/domain"
)

// jobListScanner decodes ListJobs rows straight from their wire bytes: a
// scheduler snapshot reads 100,000 rows of 28 columns, and per-value Scan
// dispatch would cost more than the query itself. Strings that repeat across
// rows (states, reasons, projects, pools, submitters, snapshot hashes) are
// shared rather than copied for every row. It handles only the column types
// the schema declares and reports any other so the caller falls back to Scan.
type jobListScanner struct {
	fields []pgconn.FieldDescription
	intern map[string]string
}

// jobColOIDs are the type OIDs of jobCols, in order.
var jobColOIDs = []uint32{
	pgtype.Int8OID, pgtype.TextOID, pgtype.TextOID, pgtype.TextOID, pgtype.TextOID, pgtype.TextOID, pgtype.TextOID,
	pgtype.TextOID, pgtype.TextOID, pgtype.Int8OID, pgtype.Int8OID, pgtype.Int8OID, pgtype.Int8OID,
	pgtype.TextOID, pgtype.TextOID, pgtype.Int4OID, pgtype.Int8OID, pgtype.Int4OID,
	pgtype.TextOID, pgtype.Int8OID, pgtype.Float8OID, pgtype.Int8OID, pgtype.Int8OID,
	pgtype.Int8OID, pgtype.Int4OID, pgtype.Int4OID, pgtype.Int4OID, pgtype.Int8OID,
}

// newJobListScanner returns a scanner for rows, or nil when their columns
// are not the ones it decodes.
func newJobListScanner(rows pgx.Rows) *jobListScanner {
	fields := rows.FieldDescriptions()
	if len(fields) != len(jobColOIDs) {
		return nil
	}
	for i, f := range fields {
		if f.DataTypeOID != jobColOIDs[i] {
			return nil
		}
	}
	return &jobListScanner{fields: fields, intern: map[string]string{}}
}

func (s *jobListScanner) str(b []byte) string {
	if v, ok := s.intern[string(b)]; ok {
		return v
	}
	v := string(b)
	if len(s.intern) < 4096 {
		s.intern[v] = v
	}
	return v
}

// int decodes an integer column; ok is false for NULL.
func (s *jobListScanner) int(i int, b []byte) (n int64, ok bool, err error) {
	if b == nil {
		return 0, false, nil
	}
	if s.fields[i].Format == pgx.TextFormatCode {
		n, err = strconv.ParseInt(string(b), 10, 64)
		return n, err == nil, err
	}
	switch len(b) {
	case 8:
		return int64(binary.BigEndian.Uint64(b)), true, nil
	case 4:
		return int64(int32(binary.BigEndian.Uint32(b))), true, nil
	}
	return 0, false, fmt.Errorf("column %s: %d bytes are not an integer", s.fields[i].Name, len(b))
}

func (s *jobListScanner) float(i int, b []byte) (float64, error) {
	if s.fields[i].Format == pgx.TextFormatCode {
		return strconv.ParseFloat(string(b), 64)
	}
	if len(b) != 8 {
		return 0, fmt.Errorf("column %s: %d bytes are not a float8", s.fields[i].Name, len(b))
	}
	return math.Float64frombits(binary.BigEndian.Uint64(b)), nil
}

// scan decodes the current row.
func (s *jobListScanner) scan(rows pgx.Rows) (domain.Job, error) {
	v := rows.RawValues()
	var (
		j    domain.Job
		ints [len(jobIntCols)]int64
		set  [len(jobIntCols)]bool
		err  error
	)
	for k, c := range jobIntCols {
		if ints[k], set[k], err = s.int(c, v[c]); err != nil {
			return domain.Job{}, err
		}
	}
	if j.Resources.CPUs, err = s.float(20, v[20]); err != nil {
		return domain.Job{}, err
	}
	at := func(k int) time.Time {
		if !set[k] {
			return time.Time{}
		}
		return time.Unix(0, ints[k]).UTC()
	}
	j.ID = ints[0]
	j.Name, j.Project, j.Pool = string(v[1]), s.str(v[2]), s.str(v[3])
	j.State, j.Reason, j.Message = domain.JobState(s.str(v[4])), domain.Reason(s.str(v[5])), s.str(v[6])
	j.Priority, j.Submitter = domain.Priority(s.str(v[7])), s.str(v[8])
	j.SubmittedAt, j.UpdatedAt, j.StartedAt, j.FinishedAt = at(1), at(2), at(3), at(4)
	j.SpecHash = s.str(v[13])
	if v[14] != nil {
		j.OutputDir = string(v[14])
	}
	j.Attempts, j.NextAttempt, j.CancelRequested = int(ints[5]), at(6), ints[7] != 0
	j.IdempotencyKey = s.str(v[18])
	j.Resources.GPUs, j.Resources.Memory, j.Resources.Nodes = int(ints[8]), domain.ByteSize(ints[9]), int(ints[10])
	j.Timeout, j.Preemptible = domain.Duration(ints[11]), ints[12] != 0
	j.PreemptRequested, j.Preemptions = ints[13] != 0, int(ints[14])
	j.RerunOf = ints[15]
	return j, nil
}

// jobIntCols are the integer columns of jobCols, in the order scan indexes
// them.
var jobIntCols = [...]int{0, 9, 10, 11, 12, 15, 16, 17, 19, 21, 22, 23, 24, 25, 26, 27}
