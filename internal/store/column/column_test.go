package column

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

func TestRoundTrips(t *testing.T) {
	for _, g := range [][]int{nil, {0}, {0, 1, 3}} {
		got, err := ParseGPUs(GPUs(g))
		if err != nil || !reflect.DeepEqual(got, g) {
			t.Errorf("GPUs %v round-trips to %v, %v", g, got, err)
		}
	}
	if _, err := ParseGPUs("0,x"); err == nil {
		t.Error("a malformed GPU list parsed")
	}
	nodes := []domain.Node{{Name: "a", CPUs: 8, Memory: 1 << 30, GPUs: []int{0, 1}}, {Name: "b", CPUs: 0.5}}
	s, err := Nodes(nodes)
	if err != nil {
		t.Fatal(err)
	}
	if s != `[{"name":"a","cpus":8,"memory":1073741824,"gpus":[0,1]},{"name":"b","cpus":0.5,"memory":0,"gpus":[]}]` {
		t.Errorf("the stored node format changed: %s (rows stored by earlier versions must still read)", s)
	}
	if got, err := ParseNodes(s); err != nil || !reflect.DeepEqual(got, nodes) {
		t.Errorf("nodes round-trip to %+v, %v", got, err)
	}
	rates := domain.Rates{GPUHour: 2_100_000, MemoryGiBHour: 125, ObjectGiBMonth: 23_000}
	if rs := Rates(rates); rs != `{"gpu_hour":2100000,"memory_gib_hour":125,"object_gib_month":23000}` {
		t.Errorf("the stored rates format changed: %s (rows stored by earlier versions must still read)", rs)
	} else if got, err := ParseRates(rs); err != nil || got != rates {
		t.Errorf("rates round-trip to %+v, %v", got, err)
	}
	if got, err := ParseRates(Rates(domain.Rates{})); err != nil || !got.IsZero() || Rates(domain.Rates{}) != "" {
		t.Errorf("no rates round-trip to %+v, %v", got, err)
	}
	if _, err := ParseRates("{"); err == nil {
		t.Error("malformed rates read without an error")
	}
	ps := []domain.Priority{domain.PriorityLow, domain.PriorityUrgent}
	if got := ParsePriorities(Priorities(ps)); !reflect.DeepEqual(got, ps) || ParsePriorities("") != nil {
		t.Errorf("priorities round-trip to %v", got)
	}
}

func TestCheckAudit(t *testing.T) {
	if err := CheckAudit(domain.AuditRecord{Actor: "user:a", Action: "job.submit", Result: domain.AuditOK}); err != nil {
		t.Fatal(err)
	}
	err := CheckAudit(domain.AuditRecord{Result: "maybe"})
	if !errors.Is(err, store.ErrInvalid) || err.Error() == "" {
		t.Fatalf("an invalid record: %v", err)
	}
}

func TestAuditForJob(t *testing.T) {
	recs := []domain.AuditRecord{{Target: "job/" + store.AuditIDPlaceholder}, {Target: "pool/x"}}
	got := AuditForJob(recs, 42)
	if got[0].Target != "job/42" || got[1].Target != "pool/x" || recs[0].Target != "job/{id}" {
		t.Fatalf("AuditForJob = %+v (input now %+v)", got, recs)
	}
	if same := AuditForJob(recs, 0); &same[0] != &recs[0] {
		t.Fatal("id 0 copied the records")
	}
}

func TestEnvColumnsRoundTrip(t *testing.T) {
	for _, in := range []domain.Environment{
		{Name: "empty", Version: 1},
		{Name: "full", Version: 2, PathPrefix: []string{"/opt/x/bin"}, Vars: map[string]string{"A": "1"}, Check: []string{"true"}},
	} {
		p, v, c, err := EnvColumns(in)
		if err != nil {
			t.Fatal(err)
		}
		if in.Name == "empty" && (p != "[]" || v != "{}" || c != "[]") {
			t.Errorf("empty environment encodes as %s %s %s, want [] {} []", p, v, c)
		}
		out := domain.Environment{Name: in.Name, Version: in.Version}
		if err := ParseEnvColumns(&out, p, v, c); err != nil || !reflect.DeepEqual(out, in) {
			t.Errorf("%s round-trips to %+v, %v", in.Name, out, err)
		}
	}
	if err := ParseEnvColumns(&domain.Environment{Name: "bad", Version: 3}, "[", "{}", "[]"); err == nil || !strings.Contains(err.Error(), "bad@3") {
		t.Errorf("a broken column gives %v, want an error naming bad@3", err)
	}
}

// TestParseRatesRemembers: a text parsed before reads the same again, a
// different text its own rates, and a malformed one fails every time.
func TestParseRatesRemembers(t *testing.T) {
	a, b := domain.Rates{CPUHour: 40_000}, domain.Rates{CPUHour: 40_000, GPUHour: 1}
	for range 2 {
		for _, want := range []domain.Rates{a, b} {
			if got, err := ParseRates(Rates(want)); err != nil || got != want {
				t.Errorf("ParseRates(%s) = %+v, %v; want %+v", Rates(want), got, err, want)
			}
		}
		if _, err := ParseRates(`{"cpu_hour":`); err == nil {
			t.Error("malformed rates read without an error")
		}
	}
}

// Every field of store.JobFilter that narrows a list must keep
// CountableStates from counting: a count that ignored it would size a list
// by jobs the list leaves out. A field added to the filter fails here until
// CountableStates (or this test's list of fields that do not narrow)
// knows of it.
func TestCountableStatesRefusesNarrowingFields(t *testing.T) {
	// These do not change how many jobs an unpaged list holds: States is
	// what is counted, Ascending only orders, and Projects and Submitter
	// count only with Restrict.
	// Into is a buffer, not a filter.
	counted := map[string]bool{"States": true, "Ascending": true, "Projects": true, "Submitter": true, "Into": true}
	typ := reflect.TypeFor[store.JobFilter]()
	for i := range typ.NumField() {
		field := typ.Field(i)
		var f store.JobFilter
		v := reflect.ValueOf(&f).Elem().Field(i)
		switch v.Kind() {
		case reflect.String:
			v.SetString("x")
		case reflect.Int, reflect.Int64:
			v.SetInt(1)
		case reflect.Bool:
			v.SetBool(true)
		case reflect.Slice:
			v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		default:
			t.Fatalf("JobFilter.%s is a %s; teach this test to set it", field.Name, v.Kind())
		}
		if _, ok := CountableStates(f); ok != counted[field.Name] {
			t.Errorf("CountableStates with only %s set: ok = %v, want %v", field.Name, ok, counted[field.Name])
		}
	}
	if states, ok := CountableStates(store.JobFilter{States: []domain.JobState{domain.JobRunning, domain.JobQueued, domain.JobRunning}}); !ok ||
		!reflect.DeepEqual(states, []string{"queued", "running"}) {
		t.Errorf("CountableStates(running, queued, running) = %q, %v; want [queued running], true", states, ok)
	}
}
