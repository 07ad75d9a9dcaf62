package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"trainyard/internal/api/apitypes"
)

// AuditOptions filters and pages GET /api/v1/audit. Zero values mean "no
// filter" and "the server's default page size".
type AuditOptions struct {
	Actor  string // e.g. "user:alice"
	Action string // e.g. "quota.write"
	Target string // exact, or a prefix ending in "/" such as "job/"
	Since  time.Time
	After  int64 // cursor: records after this Seq (AuditList.NextAfter)
	Limit  int
}

// ListAudit returns one page of audit records in log order.
func (c *Client) ListAudit(ctx context.Context, opts AuditOptions) (apitypes.AuditList, error) {
	q := url.Values{}
	for k, v := range map[string]string{"actor": opts.Actor, "action": opts.Action, "target": opts.Target} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if !opts.Since.IsZero() {
		q.Set("since", opts.Since.UTC().Format(time.RFC3339Nano))
	}
	if opts.After > 0 {
		q.Set("after", strconv.FormatInt(opts.After, 10))
	}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	var out apitypes.AuditList
	err := c.doJSON(ctx, http.MethodGet, "/api/v1/audit", q, nil, nil, &out)
	return out, err
}

// VerifyAudit asks the server to check the audit log's hash chain. A broken
// chain is not an error: the result's Problem names the first bad record.
func (c *Client) VerifyAudit(ctx context.Context) (apitypes.AuditVerification, error) {
	var out apitypes.AuditVerification
	err := c.doJSON(ctx, http.MethodGet, "/api/v1/audit/verify", nil, nil, nil, &out)
	return out, err
}

// VerifyAuditWitness is VerifyAudit that also checks the log, and the
// server's own witness, against witness: a witness file kept elsewhere (see
// AuditWitness). The server rejects a file that is not a witness.
func (c *Client) VerifyAuditWitness(ctx context.Context, witness []byte) (apitypes.AuditVerification, error) {
	var out apitypes.AuditVerification
	err := c.doJSON(ctx, http.MethodPost, "/api/v1/audit/verify", nil, nil, apitypes.AuditVerifyRequest{Witness: witness}, &out)
	return out, err
}

// AuditWitness returns the server's audit witness file, exactly as the
// server holds it, for keeping elsewhere.
func (c *Client) AuditWitness(ctx context.Context) ([]byte, error) {
	resp, err := c.do(ctx, http.MethodGet, "/api/v1/audit/witness", nil, nil, nil, "application/json")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("read the audit witness from %s: %w", c.base, err)
	}
	return b, nil
}

// ExportAudit streams every audit record after seq after (0: all) and calls
// fn with each, in log order, with the exact JSON line the server sent. It
// returns fn's first error, or an error when the stream ends early or holds
// a line that is not a record.
func (c *Client) ExportAudit(ctx context.Context, after int64, fn func(rec apitypes.AuditRecord, line []byte) error) error {
	q := url.Values{}
	if after > 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	resp, err := c.do(ctx, http.MethodGet, "/api/v1/audit/export", q, nil, nil, "application/x-ndjson")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	n := 0
	for sc.Scan() {
		n++
		var rec apitypes.AuditRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return fmt.Errorf("audit export from %s: line %d is not an audit record: %w", c.base, n, err)
		}
		if err := fn(rec, sc.Bytes()); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("audit export from %s stopped after %d records: %w; the export is incomplete, run it again", c.base, n, err)
	}
	return nil
}
