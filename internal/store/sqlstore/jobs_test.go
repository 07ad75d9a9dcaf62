package sqlstore

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

// TestNullScanPlans checks that pgx scans NullInt and NullString through
// their codecs' own scanners, not its slower sql.Scanner fallback.
func TestNullScanPlans(t *testing.T) {
	m := pgtype.NewMap()
	var (
		n NullInt
		s NullString
	)
	for _, c := range []struct {
		oid    uint32
		target any
		src    []byte
	}{
		{pgtype.Int8OID, &n, binary.BigEndian.AppendUint64(nil, 42)},
		{pgtype.Int4OID, &n, binary.BigEndian.AppendUint32(nil, 42)},
		{pgtype.TextOID, &s, []byte("42")},
	} {
		plan := m.PlanScan(c.oid, pgtype.BinaryFormatCode, c.target)
		if name := fmt.Sprintf("%T", plan); strings.Contains(name, "SQLScanner") {
			t.Errorf("oid %d into %T: plan %s goes through sql.Scanner", c.oid, c.target, name)
		}
		if err := plan.Scan(c.src, c.target); err != nil {
			t.Errorf("oid %d into %T: %v", c.oid, c.target, err)
		}
	}
	if n != (NullInt{V: 42, Valid: true}) || s != "42" {
		t.Errorf("scanned %+v and %q, want 42 and \"42\"", n, s)
	}
	if err := m.PlanScan(pgtype.Int8OID, pgtype.BinaryFormatCode, &n).Scan(nil, &n); err != nil || n.Valid {
		t.Errorf("NULL int8 scanned as %+v, %v; want invalid", n, err)
	}
}

func TestNullScan(t *testing.T) {
	var n NullInt
	for _, c := range []struct {
		src  any
		want NullInt
	}{
		{int64(7), NullInt{V: 7, Valid: true}},
		{nil, NullInt{}},
		{"8", NullInt{V: 8, Valid: true}},
	} {
		if err := n.Scan(c.src); err != nil || n != c.want {
			t.Errorf("NullInt.Scan(%#v) = %+v, %v; want %+v", c.src, n, err, c.want)
		}
	}
	if err := n.Scan("x"); err == nil {
		t.Errorf("NullInt.Scan(\"x\") = %+v, want an error", n)
	}
	var s NullString
	for _, c := range []struct {
		src  any
		want NullString
	}{{"a", "a"}, {nil, ""}, {[]byte("b"), "b"}} {
		if err := s.Scan(c.src); err != nil || s != c.want {
			t.Errorf("NullString.Scan(%#v) = %q, %v; want %q", c.src, s, err, c.want)
		}
	}
}
