package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"trainyard/internal/api"
	"trainyard/internal/api/apitypes"
	"trainyard/internal/artifacts"
	blobs3 "trainyard/internal/blob/s3"
	"trainyard/internal/domain"
	"trainyard/internal/executor/local"
	"trainyard/internal/leader"
	"trainyard/internal/metrics/sample"
	"trainyard/internal/service"
	"trainyard/internal/yamlcheck"
)

// configSource is where a server config came from: the file, and the line
// of every field path in it, so that problems found after decoding still
// name their line.
type configSource struct {
	file  string
	check *yamlcheck.Result
}

// configError is every problem with a server config; it matches
// domain.ErrInvalid, so the server exits 2. Each problem reads
// FILE:LINE: PATH: MESSAGE.
type configError struct {
	file string
	errs domain.FieldErrors
}

func (e *configError) Error() string {
	lines := make([]string, len(e.errs))
	for i, fe := range e.errs {
		var b strings.Builder
		switch {
		case e.file == "":
			b.WriteString("server config")
		case fe.Line > 0:
			fmt.Fprintf(&b, "%s:%d", e.file, fe.Line)
		default:
			b.WriteString(e.file)
		}
		if fe.Path != "" {
			b.WriteString(": " + fe.Path)
		}
		b.WriteString(": " + fe.Message)
		lines[i] = b.String()
	}
	return strings.Join(lines, "\n")
}

func (e *configError) Is(target error) bool { return target == domain.ErrInvalid }

// loadServerConfig reads a server config file strictly: every unknown key
// and wrongly typed value is reported with its path, line and, for a
// misspelt key, the field most likely meant.
func loadServerConfig(path string) (serverConfig, error) {
	var cfg serverConfig
	b, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("read server config: %w", err)
	}
	src := &configSource{file: path, check: &yamlcheck.Result{}}
	fail := func(errs domain.FieldErrors) (serverConfig, error) {
		return serverConfig{}, &configError{file: path, errs: errs}
	}
	var root yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(b)).Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			cfg.src = src
			return cfg, nil // an empty file: every default
		}
		line, msg := yamlcheck.SyntaxError(err, b)
		return fail(domain.FieldErrors{{Line: line, Message: "not valid YAML: " + msg}})
	}
	doc := root.Content[0]
	yamlcheck.Check(doc, reflect.TypeFor[serverConfig](), yamlcheck.YAML, "", src.check)
	// Pools, quotas and projects have the API's shape (docs/pools.md).
	if doc.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(doc.Content); i += 2 {
			var t reflect.Type
			switch key := doc.Content[i].Value; key {
			case "pools":
				t = reflect.TypeFor[apitypes.Pool]()
			case "quotas":
				t = reflect.TypeFor[apitypes.Quota]()
			case "projects":
				t = reflect.TypeFor[apitypes.Project]()
			default:
				continue
			}
			list := doc.Content[i+1]
			if list.Kind != yaml.SequenceNode {
				continue // reported by Check
			}
			for j, e := range list.Content {
				yamlcheck.Check(e, t, yamlcheck.JSON, fmt.Sprintf("%s[%d]", doc.Content[i].Value, j), src.check)
			}
		}
	}
	if len(src.check.Errs) > 0 {
		return fail(src.check.Errs)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil { // Check let it through: still say so
		line, msg := yamlcheck.SyntaxError(err, b)
		return fail(domain.FieldErrors{{Line: line, Message: msg}})
	}
	cfg.src = src
	return cfg, nil
}

// serverDurations are the server config's plain durations, defaulted.
type serverDurations struct {
	retry, grace, halfLife, sampleEvery, logRetention time.Duration
	maxGrace                                          time.Duration // the ceiling of policy.grace
	leaderLease                                       time.Duration // the leader lease's TTL (replicas)
	rightSizeMinRun                                   time.Duration // shorter runs are not judged by right-sizing
	grantWarning                                      time.Duration // warn this long before a grant ends; 0: never
	envCheckTTL                                       time.Duration // trust a passing environment check this long; 0: never
}

func parseDurations(cfg serverConfig) (serverDurations, error) {
	d := serverDurations{retry: 10 * time.Second, grace: 10 * time.Second, maxGrace: domain.MaxGraceDefault, halfLife: 24 * time.Hour,
		sampleEvery: sample.DefaultInterval, logRetention: service.DefaultLogRetention, leaderLease: leader.DefaultTTL,
		rightSizeMinRun: service.DefaultRightSizeMinRun, grantWarning: DefaultGrantWarning, envCheckTTL: local.DefaultEnvCheckTTL}
	for _, f := range []struct {
		name string
		s    string
		v    *time.Duration
	}{{"retry_backoff", cfg.RetryBackoff, &d.retry}, {"grace", cfg.Grace, &d.grace}, {"fair_share_half_life", cfg.FairShareHalfLife, &d.halfLife},
		{"sample_interval", cfg.SampleInterval, &d.sampleEvery}, {"max_grace", cfg.MaxGrace, &d.maxGrace}, {"leader_lease", cfg.LeaderLease, &d.leaderLease},
		{"right_size_min_run", cfg.RightSizeMinRun, &d.rightSizeMinRun}} {
		if f.s == "" {
			continue
		}
		v, err := domain.ParseDuration(f.s)
		if err != nil || v <= 0 {
			return d, fmt.Errorf("server config %s: %q is not a positive duration (e.g. 10s)", f.name, f.s)
		}
		*f.v = v
	}
	if d.grace > d.maxGrace {
		return d, fmt.Errorf("server config grace (%s) is longer than max_grace (%s), which caps every job's grace period; raise max_grace or lower grace", domain.FormatDuration(d.grace), domain.FormatDuration(d.maxGrace))
	}
	if d.leaderLease < time.Second || d.leaderLease > 5*time.Minute {
		return d, fmt.Errorf("server config leader_lease: %s is outside 1s..5m; a leader is replaced within about this long after it stops renewing (default 10s)", domain.FormatDuration(d.leaderLease))
	}
	if cfg.GrantWarning != "" {
		v, err := domain.ParseDuration(cfg.GrantWarning)
		if err != nil || v < 0 {
			return d, fmt.Errorf("server config grant_warning: %q is not a duration; use e.g. 1h, or 0 for no warning before a compute grant ends", cfg.GrantWarning)
		}
		d.grantWarning = v
	}
	if cfg.EnvCheckTTL != "" {
		v, err := domain.ParseDuration(cfg.EnvCheckTTL)
		if err != nil || v < 0 {
			return d, fmt.Errorf("server config env_check_ttl: %q is not a duration; use e.g. 1h, or 0 to run environment checks before every attempt", cfg.EnvCheckTTL)
		}
		d.envCheckTTL = v
	}
	// Log retention (docs/operator.md): 0 keeps logs forever.
	if cfg.LogRetention != "" {
		v, err := domain.ParseDuration(cfg.LogRetention)
		if err != nil || v < 0 {
			return d, fmt.Errorf("server config log_retention: %q is not a duration; use e.g. 30d, or 0 to keep logs forever", cfg.LogRetention)
		}
		d.logRetention = v
	}
	return d, nil
}

// DefaultGrantWarning is how long before a compute grant ends the jobs
// its end will preempt are warned, unless the config says otherwise.
const DefaultGrantWarning = time.Hour

// DefaultLogLimit is the server's log limit per attempt when its config
// sets none.
const DefaultLogLimit = domain.ByteSize(1 << 30)

// parseLogLimit reads the server config's log_limit: a size of at least
// domain.MinLogLimit, or 0 for no limit; "" is the default.
func parseLogLimit(s string) (domain.ByteSize, error) {
	if s == "" {
		return DefaultLogLimit, nil
	}
	b, err := domain.ParseByteSize(s)
	if err != nil || (b != 0 && b < domain.MinLogLimit) {
		return 0, fmt.Errorf("server config log_limit: %q is not a log limit; use a size of at least %s such as 1GiB, or 0 for no limit", s, domain.ByteSize(domain.MinLogLimit))
	}
	return b, nil
}

// parseDetailCache reads the server config's detail_cache: a size, 0 for
// no cache; "" is the store's default. It returns sqlite.Options'
// DetailCacheBytes.
func parseDetailCache(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	b, err := domain.ParseByteSize(s)
	if err != nil || b < 0 {
		return 0, fmt.Errorf("server config detail_cache: %q is not a size; use one such as 256MiB (the default), or 0 to turn the cache off", s)
	}
	if b == 0 {
		return -1, nil
	}
	return int64(b), nil
}

// parseCurrency reads the server config's currency; "" is
// domain.DefaultCurrency.
func parseCurrency(s string) (string, error) {
	if s == "" {
		return domain.DefaultCurrency, nil
	}
	if err := domain.CheckCurrency(s); err != nil {
		return "", fmt.Errorf("server config currency: %q is not a currency code; use three uppercase letters such as USD (the default) or EUR", s)
	}
	return s, nil
}

// checkDuplicates checks the server config's duplicate_submits.
func checkDuplicates(s string) error {
	switch s {
	case "", service.DuplicatesWarn, service.DuplicatesRefuse:
		return nil
	}
	return fmt.Errorf("server config duplicate_submits: %q is not a policy; use warn (the default) or refuse", s)
}

// validateServerConfig checks what the server would refuse at start, as far
// as that is possible without the store, the data directory's contents or
// the network: every problem, each with its path and line.
func validateServerConfig(cfg serverConfig) error {
	var problems []error
	add := func(err error) {
		if err != nil {
			problems = append(problems, err)
		}
	}
	_, err := parseDurations(cfg)
	add(err)
	_, err = parseLogLimit(cfg.LogLimit)
	add(err)
	_, err = parseDetailCache(cfg.DetailCache)
	add(err)
	currency, err := parseCurrency(cfg.Currency)
	add(err)
	add(checkDuplicates(cfg.DuplicateSubmits))
	_, err = parseMetricsAuth(cfg)
	add(err)
	if err := artifacts.ValidatePolicies(cfg.Retention); err != nil {
		add(fmt.Errorf("server config %w", err))
	}
	if err := artifacts.ValidateLifecycle(cfg.CheckpointLifecycle, cfg.ObjectStore != ""); err != nil {
		add(fmt.Errorf("server config %w", err))
	}
	_, err = cfg.Code.limits()
	add(err)
	_, err = cfg.PreemptionGuard.guard()
	add(err)
	_, err = cfg.RetryStorm.storm()
	add(err)
	if inv := cfg.Inventory; inv != nil && inv.Memory != "" {
		if _, err := domain.ParseByteSize(inv.Memory); err != nil {
			add(fmt.Errorf("server config inventory.memory: %w", err))
		}
	}
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		add(errors.New("server config tls_cert: TLS needs both a certificate and a key: give tls_cert and tls_key (or --tls-cert and --tls-key) together"))
	}
	if cfg.ObjectStore != "" {
		if _, err := blobs3.ParseURL(cfg.ObjectStore); err != nil {
			add(fmt.Errorf("server config object_store: %w", err))
		}
	}
	if cfg.RendezvousPorts != "" {
		if _, err := local.ParsePortRange(cfg.RendezvousPorts); err != nil {
			add(fmt.Errorf("server config rendezvous_ports: %w", err))
		}
	}
	problems = append(problems, cfg.Envs.check()...)
	switch cfg.Isolation {
	case "", isolationAuto, isolationRequired, isolationOff:
	default:
		add(fmt.Errorf("server config isolation: %q is not a mode; use auto (isolate when running as root), required or off", cfg.Isolation))
	}
	alertsCfg := cfg.Alerts
	alertsCfg.Defaults()
	if err := alertsCfg.Validate(); err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			add(errors.New("server config " + line))
		}
	}
	if err := checkPublicURL(cfg.PublicURL); err != nil { // notify.go
		add(err)
	}
	if data := cfg.Data; data != "" {
		if _, err := os.Stat(data); err == nil {
			if _, err := cfg.DataRoots.Resolve(data); err != nil {
				add(fmt.Errorf("server config %w", err))
			}
		}
	}
	problems = append(problems, validateExecutors(cfg.Executors)...)
	var errs domain.FieldErrors
	for _, err := range problems {
		errs = append(errs, cfg.fieldError("", err)...)
	}
	for i := range cfg.Pools {
		var in apitypes.Pool
		if decodeAPI(&cfg.Pools[i], &in) != nil {
			continue // loadServerConfig reported it
		}
		p, err := api.PoolFromDTO(in)
		if c := in.Rates.Currency; c != "" && currency != "" && c != currency {
			err = domain.FieldErrors{{Path: "rates.currency", Message: fmt.Sprintf(
				"rates are in the server's currency, %s, not %q; leave currency out, or set the top-level currency", currency, c)}}
		}
		if err == nil {
			if p.Executor == "" {
				p.Executor = service.ExecutorLocal // as PutPool does
			}
			err = service.ValidatePoolOn(p, executorNames(cfg.Executors))
		}
		errs = append(errs, cfg.fieldError(fmt.Sprintf("pools[%d]", i), err)...)
	}
	for i := range cfg.Quotas {
		var in apitypes.Quota
		if decodeAPI(&cfg.Quotas[i], &in) != nil {
			continue
		}
		_, err := api.QuotaFromDTO(in)
		errs = append(errs, cfg.fieldError(fmt.Sprintf("quotas[%d]", i), err)...)
	}
	if len(errs) == 0 {
		return nil
	}
	file := ""
	if cfg.src != nil {
		file = cfg.src.file
	}
	return &configError{file: file, errs: errs}
}

// fieldError turns err, found under path, into field errors with lines:
// domain.FieldErrors keep their paths (below path); "server config PATH:
// MESSAGE" errors are split at the path.
func (cfg serverConfig) fieldError(path string, err error) domain.FieldErrors {
	if err == nil {
		return nil
	}
	var out domain.FieldErrors
	var fes domain.FieldErrors
	if errors.As(err, &fes) {
		for _, fe := range fes {
			out = append(out, domain.FieldError{Path: joinPath(path, fe.Path), Message: fe.Message})
		}
	} else {
		msg := strings.TrimPrefix(err.Error(), "server config ")
		p := path
		if head, rest, ok := strings.Cut(msg, ": "); ok && !strings.ContainsAny(head, " \"") {
			p, msg = joinPath(path, head), rest
		}
		out = append(out, domain.FieldError{Path: p, Message: msg})
	}
	if cfg.src != nil {
		for i := range out {
			out[i].Line = cfg.src.check.LineOf(out[i].Path)
		}
	}
	return out
}

func joinPath(parent, p string) string {
	switch {
	case parent == "":
		return p
	case p == "":
		return parent
	case strings.HasPrefix(p, "["):
		return parent + p
	}
	return parent + "." + p
}
