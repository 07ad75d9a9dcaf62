package service

import "testing"

// TestSubmitSummaryIsTheMapJSON: a submit's audit record reads as it did
// when its After was the JSON of a map[string]string: same keys, same
// order, same escaping.
func TestSubmitSummaryIsTheMapJSON(t *testing.T) {
	for _, v := range []submitSummary{
		{Name: "train", Pool: "default", Project: "default", SpecHash: "sha256:00ff"},
		{Name: "a<b>&c", Pool: "x\"y\\z", Project: "p\u2028q\u00e9", SpecHash: ""},
	} {
		want := summary(map[string]string{"name": v.Name, "pool": v.Pool, "project": v.Project, "spec_hash": v.SpecHash})
		if got := summary(v); got != want {
			t.Errorf("summary(%+v) = %s, want %s", v, got, want)
		}
	}
}
