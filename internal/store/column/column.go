// Package column holds the column formats both store backends write, so a
// row copied from one backend (trainyard store copy) reads the same in the
// other, and the rules both apply to what they store. It imports domain and
// store only.
package column

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// GPUs encodes GPU indices as "0,1,3"; no GPUs is "".
func GPUs(gpus []int) string {
	var b strings.Builder
	for i, g := range gpus {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(g))
	}
	return b.String()
}

// ParseGPUs decodes a value written by GPUs; "" is nil.
func ParseGPUs(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	gpus := make([]int, len(parts))
	for i, p := range parts {
		g, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("stored GPU list %q is malformed: %w", s, err)
		}
		gpus[i] = g
	}
	return gpus, nil
}

// node is the stored form of a domain.Node (domain types carry no JSON
// tags, so the column format is fixed here).
type node struct {
	Name   string  `json:"name"`
	CPUs   float64 `json:"cpus"`
	Memory int64   `json:"memory"`
	GPUs   []int   `json:"gpus"`
}

// Nodes encodes a pool's nodes as a JSON array.
func Nodes(nodes []domain.Node) (string, error) {
	out := make([]node, len(nodes))
	for i, n := range nodes {
		gpus := n.GPUs
		if gpus == nil {
			gpus = []int{}
		}
		out[i] = node{Name: n.Name, CPUs: n.CPUs, Memory: int64(n.Memory), GPUs: gpus}
	}
	b, err := json.Marshal(out)
	return string(b), err
}

// rates is the stored form of domain.Rates: each rate in micros (integer
// millionths of the currency unit), so the column stays exact whatever
// Money's text form becomes; a zero rate is left out.
type rates struct {
	GPUHour        int64 `json:"gpu_hour,omitempty"`
	CPUHour        int64 `json:"cpu_hour,omitempty"`
	MemoryGiBHour  int64 `json:"memory_gib_hour,omitempty"`
	LocalGiBMonth  int64 `json:"local_gib_month,omitempty"`
	ObjectGiBMonth int64 `json:"object_gib_month,omitempty"`
}

// Rates encodes a pool's rates as a JSON object of micros; no rates is "".
func Rates(r domain.Rates) string {
	if r.IsZero() {
		return ""
	}
	b, _ := json.Marshal(rates{int64(r.GPUHour), int64(r.CPUHour), int64(r.MemoryGiBHour),
		int64(r.LocalGiBMonth), int64(r.ObjectGiBMonth)})
	return string(b)
}

// ParseRates decodes a value written by Rates; "" (rows from before rates)
// is no rates.
func ParseRates(s string) (domain.Rates, error) {
	if s == "" {
		return domain.Rates{}, nil
	}
	if r, ok := parsedRates.Load(s); ok {
		return r.(domain.Rates), nil
	}
	var in rates
	if err := json.Unmarshal([]byte(s), &in); err != nil {
		return domain.Rates{}, fmt.Errorf("stored rates are malformed: %w", err)
	}
	r := domain.Rates{GPUHour: domain.Money(in.GPUHour), CPUHour: domain.Money(in.CPUHour),
		MemoryGiBHour: domain.Money(in.MemoryGiBHour), LocalGiBMonth: domain.Money(in.LocalGiBMonth),
		ObjectGiBMonth: domain.Money(in.ObjectGiBMonth)}
	if parsedRatesN.Add(1) <= maxParsedRates {
		parsedRates.Store(s, r)
	}
	return r, nil
}

// parsedRates holds what ParseRates decoded, by text: a store holds few
// distinct rates, and every job shown or listed is priced from its pool's
// history. At most maxParsedRates texts are kept.
var (
	parsedRates  sync.Map // string → domain.Rates
	parsedRatesN atomic.Int64
)

const maxParsedRates = 4096

// ParseNodes decodes a value written by Nodes; an empty list is nil.
func ParseNodes(s string) ([]domain.Node, error) {
	var in []node
	if err := json.Unmarshal([]byte(s), &in); err != nil {
		return nil, fmt.Errorf("stored node list is malformed: %w", err)
	}
	if len(in) == 0 {
		return nil, nil
	}
	nodes := make([]domain.Node, len(in))
	for i, n := range in {
		var gpus []int
		if len(n.GPUs) > 0 {
			gpus = n.GPUs
		}
		nodes[i] = domain.Node{Name: n.Name, CPUs: n.CPUs, Memory: domain.ByteSize(n.Memory), GPUs: gpus}
	}
	return nodes, nil
}

// Priorities encodes priority classes as "low,normal"; none is "".
func Priorities(ps []domain.Priority) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = string(p)
	}
	return strings.Join(parts, ",")
}

// ParsePriorities decodes a value written by Priorities; "" is nil.
func ParsePriorities(s string) []domain.Priority {
	if s == "" {
		return nil
	}
	parts := strings.Split(s, ",")
	ps := make([]domain.Priority, len(parts))
	for i, p := range parts {
		ps[i] = domain.Priority(p)
	}
	return ps
}

// CheckAudit rejects an audit record the log must not hold.
func CheckAudit(rec domain.AuditRecord) error {
	var problems []string
	if rec.Actor == "" {
		problems = append(problems, "the actor is empty")
	}
	if rec.Action == "" {
		problems = append(problems, "the action is empty")
	}
	switch rec.Result {
	case domain.AuditOK, domain.AuditDenied, domain.AuditFailed:
	default:
		problems = append(problems, fmt.Sprintf("result %q is not ok, denied or failed", rec.Result))
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("audit record %q on %q: %s: %w", rec.Action, rec.Target, strings.Join(problems, "; "), store.ErrInvalid)
}

// CheckNewJob rejects a CreateJob input before anything is written: the
// spec's canonical JSON must be there and match its hash, and a code
// package reference must be a SHA-256.
func CheckNewJob(p store.NewJob) error {
	if len(p.SpecJSON) == 0 {
		return fmt.Errorf("create job: SpecJSON is empty; pass the canonical JSON of the spec: %w", domain.ErrInvalid)
	}
	sum := sha256.Sum256(p.SpecJSON)
	if want := "sha256:" + hex.EncodeToString(sum[:]); p.SpecHash != want {
		return fmt.Errorf("create job: SpecHash %q does not match the SHA-256 of SpecJSON (%s); compute it from the exact bytes stored: %w",
			p.SpecHash, want, domain.ErrInvalid)
	}
	if c := p.Code; c != nil {
		h, ok := strings.CutPrefix(c.SHA256, "sha256:")
		if !ok || len(h) != 64 || strings.Trim(h, "0123456789abcdef") != "" {
			return fmt.Errorf("create job: code package hash %q is not \"sha256:<64 lowercase hex>\": %w", c.SHA256, store.ErrInvalid)
		}
	}
	return nil
}

// AuditForJob returns recs with store.AuditIDPlaceholder in their Target
// replaced by the id of the job just created ("job/{id}" becomes
// "job/42"); recs itself is not changed. id 0 returns recs as they are.
func AuditForJob(recs []domain.AuditRecord, id int64) []domain.AuditRecord {
	if id == 0 {
		return recs
	}
	out := make([]domain.AuditRecord, len(recs))
	copy(out, recs)
	s := strconv.FormatInt(id, 10)
	for i := range out {
		out[i].Target = strings.ReplaceAll(out[i].Target, store.AuditIDPlaceholder, s)
	}
	return out
}

// CountableStates reports whether an unpaged ListJobs with filter f can be
// sized by counting jobs in states (all jobs when states is empty): only a
// filter on states alone can (a field it does not know of must be added
// here, or the count would size a list by jobs the list leaves out). The
// states come sorted, each once.
func CountableStates(f store.JobFilter) (states []string, ok bool) {
	if f.Limit != 0 || f.Project != "" || f.Restrict || f.BeforeID != 0 ||
		f.Owner != "" || f.Pool != "" || f.NameContains != "" || f.Sweep != 0 {
		return nil, false
	}
	for _, st := range f.States {
		states = append(states, string(st))
	}
	slices.Sort(states)
	return slices.Compact(states), true
}

// EnvColumns encodes an environment's PATH prefix, variables and check
// command as the JSON text both backends store ([] and {} when empty).
func EnvColumns(e domain.Environment) (prefix, vars, check string, err error) {
	list := func(xs []string) []string {
		if xs == nil {
			return []string{}
		}
		return xs
	}
	m := e.Vars
	if m == nil {
		m = map[string]string{}
	}
	p, err1 := json.Marshal(list(e.PathPrefix))
	v, err2 := json.Marshal(m)
	c, err3 := json.Marshal(list(e.Check))
	if err := errors.Join(err1, err2, err3); err != nil {
		return "", "", "", err
	}
	return string(p), string(v), string(c), nil
}

// ParseEnvColumns decodes EnvColumns' text into e (nil when empty).
func ParseEnvColumns(e *domain.Environment, prefix, vars, check string) error {
	if err := errors.Join(json.Unmarshal([]byte(prefix), &e.PathPrefix), json.Unmarshal([]byte(vars), &e.Vars),
		json.Unmarshal([]byte(check), &e.Check)); err != nil {
		return fmt.Errorf("decode environment %s@%d: %w", e.Name, e.Version, err)
	}
	if len(e.PathPrefix) == 0 {
		e.PathPrefix = nil
	}
	if len(e.Vars) == 0 {
		e.Vars = nil
	}
	if len(e.Check) == 0 {
		e.Check = nil
	}
	return nil
}

// AddMembers checks and adds the members of sweep id with add, in order,
// and returns them: CreateSweep's loop, for both backends.
func AddMembers(news []store.NewJob, id int64, add func(store.NewJob) (domain.Job, error)) ([]domain.Job, error) {
	jobs := make([]domain.Job, 0, len(news))
	for _, p := range news {
		if err := CheckNewJob(p); err != nil {
			return nil, err
		}
		p.Sweep = id
		j, err := add(p)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	return jobs, nil
}
