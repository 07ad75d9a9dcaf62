package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"trainyard/internal/api/apitypes"
)

func TestPoolRequestShapes(t *testing.T) {
	ctx := context.Background()
	tests := map[string]struct {
		call   func(c *Client) error
		method string
		path   string
		query  string
		body   string // JSON; "" means no body
		status int    // 0: 200
		reply  any
	}{
		"list pools": {
			call: func(c *Client) error {
				ps, err := c.ListPools(ctx)
				if err == nil && (len(ps) != 1 || ps[0].Name != "standard") {
					t.Errorf("pools = %+v", ps)
				}
				return err
			},
			method: "GET", path: "/api/v1/pools",
			reply: apitypes.PoolList{Pools: []apitypes.Pool{{Name: "standard"}}},
		},
		"get pool": {
			call:   func(c *Client) error { _, err := c.GetPool(ctx, "standard"); return err },
			method: "GET", path: "/api/v1/pools/standard", reply: apitypes.Pool{Name: "standard"},
		},
		"put pool": {
			call: func(c *Client) error {
				_, err := c.PutPool(ctx, apitypes.Pool{Name: "std", Nodes: []apitypes.Node{{Name: "n1", CPUs: 8, Memory: "32GiB", GPUs: []int{0, 1}}}, MaxRunning: 2})
				return err
			},
			method: "PUT", path: "/api/v1/pools/std",
			body: `{"name":"std","nodes":[{"name":"n1","cpus":8,"memory":"32GiB","gpus":[0,1]}],"max_gpus_per_job":0,
				"max_nodes_per_job":0,"max_running":2,"borrowing":false,"preemption":false}`,
			status: http.StatusCreated, reply: apitypes.Pool{Name: "std"},
		},
		"list quotas filtered": {
			call:   func(c *Client) error { _, err := c.ListQuotas(ctx, "vision", "std"); return err },
			method: "GET", path: "/api/v1/quotas", query: "pool=std&project=vision", reply: apitypes.QuotaList{},
		},
		"list quotas": {
			call:   func(c *Client) error { _, err := c.ListQuotas(ctx, "", ""); return err },
			method: "GET", path: "/api/v1/quotas", reply: apitypes.QuotaList{},
		},
		"put quota": {
			call: func(c *Client) error {
				_, err := c.PutQuota(ctx, apitypes.Quota{Project: "vision", Pool: "std", GPUs: 2, Borrow: apitypes.QuotaBorrow{GPUs: 1}})
				return err
			},
			method: "PUT", path: "/api/v1/quotas/vision/std",
			body:  `{"project":"vision","pool":"std","gpus":2,"cpus":0,"memory":"","jobs":0,"borrow":{"gpus":1,"cpus":0,"memory":""}}`,
			reply: apitypes.Quota{},
		},
		"delete quota": {
			call:   func(c *Client) error { return c.DeleteQuota(ctx, "vision", "std") },
			method: "DELETE", path: "/api/v1/quotas/vision/std", status: http.StatusNoContent,
		},
		"list projects": {
			call:   func(c *Client) error { _, err := c.ListProjects(ctx); return err },
			method: "GET", path: "/api/v1/projects", reply: apitypes.ProjectList{},
		},
		"set project": {
			call:   func(c *Client) error { _, err := c.SetProject(ctx, "vision", 2); return err },
			method: "PUT", path: "/api/v1/projects/vision", body: `{"name":"vision","shares":2}`,
			reply: apitypes.Project{Name: "vision", Shares: 2},
		},
		"queue of a pool": {
			call: func(c *Client) error {
				q, err := c.Queue(ctx, "std")
				if err == nil && (len(q) != 1 || q[0].ID != 3) {
					t.Errorf("queue = %+v", q)
				}
				return err
			},
			method: "GET", path: "/api/v1/queue", query: "pool=std",
			reply: apitypes.Queue{Entries: []apitypes.QueueEntry{{ID: 3}}},
		},
		"queue of every pool": {
			call:   func(c *Client) error { _, err := c.Queue(ctx, ""); return err },
			method: "GET", path: "/api/v1/queue", reply: apitypes.Queue{},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			srv, reqs := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				status := tc.status
				if status == 0 {
					status = http.StatusOK
				}
				if tc.reply == nil {
					w.WriteHeader(status)
					return
				}
				writeJSON(w, status, tc.reply)
			})
			if err := tc.call(New(srv.URL, "tok")); err != nil {
				t.Fatalf("call: %v", err)
			}
			seen := reqs()
			if len(seen) != 1 {
				t.Fatalf("server saw %d requests, want 1", len(seen))
			}
			got := seen[0]
			if got.Method != tc.method || got.Path != tc.path || got.RawQuery != tc.query {
				t.Errorf("request = %s %s?%s, want %s %s?%s", got.Method, got.Path, got.RawQuery, tc.method, tc.path, tc.query)
			}
			if tc.body == "" {
				if got.Body != "" {
					t.Errorf("body = %q, want none", got.Body)
				}
				return
			}
			var gotBody, wantBody any
			if err := json.Unmarshal([]byte(got.Body), &gotBody); err != nil {
				t.Fatalf("body %q is not JSON: %v", got.Body, err)
			}
			if err := json.Unmarshal([]byte(tc.body), &wantBody); err != nil {
				t.Fatalf("test body is not JSON: %v", err)
			}
			gb, _ := json.Marshal(gotBody)
			wb, _ := json.Marshal(wantBody)
			if string(gb) != string(wb) {
				t.Errorf("body = %s, want %s", gb, wb)
			}
		})
	}
}

func TestDeleteQuotaNotFound(t *testing.T) {
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, apitypes.Error{Error: apitypes.ErrorBody{Code: "not_found", Message: `project "vision" has no quota in pool "std"`}})
	})
	err := New(srv.URL, "tok").DeleteQuota(context.Background(), "vision", "std")
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 404 || apiErr.Code != "not_found" {
		t.Errorf("err = %v, want a 404 APIError", err)
	}
}
