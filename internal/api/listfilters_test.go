package api_test

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"trainyard/internal/api/apitypes"
)

// GET /api/v1/jobs narrows to one user's jobs (user), one pool's (pool)
// and those whose name holds some text in either case (q), with the other
// filters and pages; bad values are a 400 naming the parameter.
func TestListByUserPoolAndName(t *testing.T) {
	e := newEnv(t)
	if code, b := e.do("PUT", "/api/v1/pools/gpu", e.token, `{"name": "gpu", "borrowing": true, "nodes": [{"name": "g1", "cpus": 8, "memory": "32GiB"}]}`); code/100 != 2 {
		t.Fatalf("create pool gpu: %d %s", code, b)
	}
	if code, b := e.do("PUT", "/api/v1/quotas/default/gpu", e.token, `{"cpus": 8, "memory": "32GiB"}`); code/100 != 2 {
		t.Fatalf("set quota: %d %s", code, b)
	}
	bob := e.memberToken(t, "bob", "default")
	for _, s := range []struct{ token, spec string }{
		{e.token, "name: train-resnet\nentrypoint: [true]\n"},
		{bob, "name: eval-resnet\npool: gpu\nentrypoint: [true]\n"},
		{e.token, "name: sweep\npool: gpu\nentrypoint: [true]\n"},
		{bob, "name: resnet-big\nentrypoint: [true]\n"},
	} {
		j, _ := json.Marshal(s.spec)
		if code, b := e.do("POST", "/api/v1/jobs", s.token, apitypes.SubmitRequest{Spec: j}); code != 201 {
			t.Fatalf("submit: %d %s", code, b)
		}
	}
	list := func(query string) (names []string, cursor string) {
		t.Helper()
		code, b := e.do("GET", "/api/v1/jobs?"+query, e.token, nil)
		var l apitypes.JobList
		if err := json.Unmarshal(b, &l); err != nil || code != 200 {
			t.Fatalf("GET ?%s: %d %s", query, code, b)
		}
		for _, j := range l.Jobs {
			names = append(names, j.Name)
		}
		return names, l.NextCursor
	}
	for query, want := range map[string]string{
		"user=bob":                       "resnet-big eval-resnet",
		"user=admin&pool=gpu":            "sweep",
		"pool=gpu":                       "sweep eval-resnet",
		"q=RESNET":                       "resnet-big eval-resnet train-resnet",
		"q=" + url.QueryEscape("T-b"):    "resnet-big",
		"q=resnet&pool=default":          "resnet-big train-resnet",
		"q=resnet&user=bob&state=queued": "resnet-big eval-resnet",
		"q=resnet&state=held,running":    "",
		"q=" + url.QueryEscape("%"):      "",
		"user=nobody":                    "",
		"q=":                             "resnet-big sweep eval-resnet train-resnet",
	} {
		if got, _ := list(query); strings.Join(got, " ") != want {
			t.Errorf("GET ?%s = %q, want %q", query, got, want)
		}
	}
	// Pages of one keep the filter.
	var all []string
	for page, cursor := 0, ""; page == 0 || cursor != ""; page++ {
		if page > 4 {
			t.Fatal("paging does not end")
		}
		var got []string
		got, cursor = list("q=resnet&limit=1&cursor=" + cursor)
		all = append(all, got...)
	}
	if strings.Join(all, " ") != "resnet-big eval-resnet train-resnet" {
		t.Errorf("pages of q=resnet: %q", all)
	}

	for query, field := range map[string]string{
		"q=" + strings.Repeat("a", 201):    "q",
		"q=" + url.QueryEscape("a\nb"):     "q",
		"user=" + url.QueryEscape("a\x1b"): "user",
		"pool=GPU":                         "pool",
	} {
		code, b := e.do("GET", "/api/v1/jobs?"+query, e.token, nil)
		got := decodeErr(t, b)
		if code != 400 || got.Code != "invalid_request" || len(got.Fields) != 1 || got.Fields[0].Path != field {
			t.Errorf("GET ?%.40s = %d %+v; want 400 invalid_request at %s", query, code, got, field)
		}
	}
}
