package jobspec

import (
	"fmt"
	"math"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"trainyard/internal/domain"
	"trainyard/internal/lazyre"
)

// Patterns of the spec's names. They also appear in Schema.
const (
	// NamePattern is the rule for name, project, pool and input names:
	// 1–63 lowercase letters, digits and '-', starting and ending with a
	// letter or digit.
	NamePattern = `^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`
	// EnvPattern is the rule for env: "host" or "<name>@<version>".
	EnvPattern = `^(host|[a-z0-9][a-z0-9._-]{0,62}@[A-Za-z0-9][A-Za-z0-9._+-]{0,62})$`
	// ParamPattern is the rule for params and env_vars names.
	ParamPattern = `^[A-Za-z_][A-Za-z0-9_]*$`
	// SecretPattern is the rule for secret names.
	SecretPattern = `^[A-Z_][A-Z0-9_]*$`
	// LabelKeyPattern is the rule for label keys (at most 63 characters).
	LabelKeyPattern = `^[a-z0-9]([a-z0-9._/-]*[a-z0-9])?$`

	envNamePattern    = `^[a-z0-9][a-z0-9._-]{0,62}$`
	envVersionPattern = `^[A-Za-z0-9][A-Za-z0-9._+-]{0,62}$`
)

// Limits enforced by Validate.
const (
	MaxNameLen  = 63  // name, project, pool, input names
	MaxLabelLen = 63  // label keys and values
	MaxRetries  = 100 // policy.retries
)

// JobOutputPlaceholder must appear in a user-given outputs.path so that two
// jobs never share an output directory.
const JobOutputPlaceholder = "{job_id}"

// ReservedEnvPrefix starts the names of the variables the platform sets.
const ReservedEnvPrefix = "TRAINYARD_"

var (
	nameRE       = lazyre.New(NamePattern)
	envNameRE    = lazyre.New(envNamePattern)
	envVersionRE = lazyre.New(envVersionPattern)
	paramRE      = lazyre.New(ParamPattern)
	secretRE     = lazyre.New(SecretPattern)
	labelKeyRE   = lazyre.New(LabelKeyPattern)
)

// retriesNeedReentrant is the R08 message.
const retriesNeedReentrant = "retries are allowed only for re-entrant jobs; set policy.reentrant: true if the job can safely run again, or remove policy.retries"

// Validate checks every rule of a spec and returns all problems, each with
// its field path and a message that says how to fix it. It expects defaults
// to be filled already (see Load); it reads nothing but s.
func Validate(s domain.Spec) domain.FieldErrors {
	var es domain.FieldErrors
	checkName(&es, "name", s.Name, "resnet50-baseline")
	checkName(&es, "project", s.Project, "vision")
	checkName(&es, "pool", s.Pool, "standard")
	checkEnv(&es, s.Env)
	checkEntrypoint(&es, s)
	if s.Workdir != "" {
		checkAbsClean(&es, "workdir", s.Workdir, "; the CLI resolves a relative workdir against the spec file's directory")
	}
	checkResources(&es, s.Resources)
	checkInputs(&es, s.Inputs)
	checkOutputs(&es, s.Outputs)
	checkParams(&es, s.Params)
	checkEnvVars(&es, s.EnvVars)
	checkSecrets(&es, s.Secrets, s.EnvVars)
	checkPolicy(&es, s.Policy)
	if s.Checkpoint.Keep < 0 {
		es.Add("checkpoint.keep", "must be 0 or more, got %d", s.Checkpoint.Keep)
	}
	if s.Health.FirstProgress < 0 {
		es.Add("health.first_progress", "must be 0 or more (0 disables the check), got %s", s.Health.FirstProgress)
	}
	if s.Health.Stall < 0 {
		es.Add("health.stall", "must be 0 or more (0 disables the check), got %s", s.Health.Stall)
	}
	checkLabels(&es, s.Labels)
	checkAfter(&es, s.After)
	CheckSweep(&es, s.Sweep)
	checkNotify(&es, s.Notify) // notify.go
	checkResume(&es, s.Resume) // resume.go
	return es
}

func checkName(es *domain.FieldErrors, p, v, example string) {
	switch {
	case v == "":
		es.Add(p, "is required; use 1–63 lowercase letters, digits and '-', e.g. %q", example)
	case len(v) > MaxNameLen:
		es.Add(p, "is %d characters long; use at most %d lowercase letters, digits and '-', e.g. %q", len(v), MaxNameLen, slug(v, example))
	case !nameRE.MatchString(v):
		es.Add(p, "%q is not allowed: use lowercase letters, digits and '-', starting and ending with a letter or digit, e.g. %q", v, slug(v, example))
	}
}

// slug turns v into a valid name, for "e.g." hints; it falls back to example.
func slug(v, example string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(v) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	s := b.String()
	if len(s) > MaxNameLen {
		s = s[:MaxNameLen]
	}
	s = strings.Trim(s, "-")
	if !nameRE.MatchString(s) {
		return example
	}
	return s
}

func checkEnv(es *domain.FieldErrors, v string) {
	if v == "host" {
		return
	}
	if v == "" {
		es.Add("env", `is required; use a pinned environment name@version such as "pytorch-2.4@3", or "host"`)
		return
	}
	name, version, ok := strings.Cut(v, "@")
	switch {
	case !ok:
		es.Add("env", "%q is not pinned to a version; write name@version, e.g. %q, or \"host\" to run on the machine's own software", v, exampleEnv(v))
	case version == "":
		es.Add("env", "%q has no version after '@'; pin one, e.g. %q", v, exampleEnv(name))
	case strings.EqualFold(version, "latest"):
		es.Add("env", "%q is not pinned: \"latest\" changes over time, so reruns could differ; name an exact version, e.g. %q", v, exampleEnv(name))
	case !envNameRE.MatchString(name):
		es.Add("env", "environment name %q may use only lowercase letters, digits, '.', '_' and '-' (at most 63)", name)
	case !envVersionRE.MatchString(version):
		es.Add("env", "version %q may use only letters, digits, '.', '_', '+' and '-' (at most 63)", version)
	}
}

func exampleEnv(name string) string {
	if !envNameRE.MatchString(name) {
		name = "pytorch-2.4"
	}
	return name + "@3"
}

func checkEntrypoint(es *domain.FieldErrors, s domain.Spec) {
	argv := s.Entrypoint
	if len(argv) == 0 {
		if s.Entrypoint == nil {
			es.Add("entrypoint", "is required; give the program and its arguments, e.g. [python3, train.py], or a shell command string")
		} else {
			es.Add("entrypoint", "is empty; give the program and its arguments, e.g. [python3, train.py], or a shell command string")
		}
		return
	}
	if s.Shell {
		if len(argv) != 3 || argv[0] != "/bin/sh" || argv[1] != "-c" {
			es.Add("shell", "is true but entrypoint is not [/bin/sh, -c, <command>]; write entrypoint as a string instead of setting shell")
			return
		}
		if strings.TrimSpace(argv[2]) == "" {
			es.Add("entrypoint", `the shell command is empty; give a command such as "python3 train.py"`)
			return
		}
	} else if strings.TrimSpace(argv[0]) == "" {
		es.Add("entrypoint[0]", "the program name is empty; give a program such as python3")
	}
	for i, a := range argv {
		if msg := textProblem(a); msg != "" {
			es.Add(fmt.Sprintf("entrypoint[%d]", i), "%s, which a process argument cannot hold", msg)
		}
	}
}

// textProblem says what makes s unusable as a process argument or
// environment value, or returns "".
func textProblem(s string) string {
	if !utf8.ValidString(s) {
		return "is not valid UTF-8 text"
	}
	if strings.IndexByte(s, 0) >= 0 {
		return "contains a NUL character"
	}
	return ""
}

// checkAbsClean requires an absolute, clean POSIX path.
func checkAbsClean(es *domain.FieldErrors, p, v, hint string) {
	switch {
	case textProblem(v) != "":
		es.Add(p, "%s, which a path cannot hold", textProblem(v))
	case !path.IsAbs(v):
		es.Add(p, "%q is not an absolute path; start it with '/'%s", v, hint)
	case path.Clean(v) != v:
		es.Add(p, "%q is not a clean path; write it as %q", v, path.Clean(v))
	}
}

func checkResources(es *domain.FieldErrors, r domain.Resources) {
	if r.GPUs < 0 {
		es.Add("resources.gpus", "must be 0 or more, got %d", r.GPUs)
	}
	switch {
	case math.IsNaN(r.CPUs) || math.IsInf(r.CPUs, 0):
		es.Add("resources.cpus", "must be a finite number of cores such as 0.5 or 8")
	case r.CPUs <= 0:
		es.Add("resources.cpus", "must be more than 0 cores, got %g; use e.g. 0.5 or 8", r.CPUs)
	}
	if r.Memory <= 0 {
		es.Add("resources.memory", "must be more than 0; give a size such as 512MiB or 32GiB")
	}
	if r.Nodes < 1 {
		es.Add("resources.nodes", "must be 1 or more (1 for a single-machine job), got %d", r.Nodes)
	}
}

func checkInputs(es *domain.FieldErrors, inputs []domain.Input) {
	first := map[string]int{}
	for i, in := range inputs {
		p := fmt.Sprintf("inputs[%d]", i)
		if in.FromJob != 0 {
			if in.Name == "" {
				in.Name = fmt.Sprintf("job-%d", in.FromJob)
			}
			checkFromJob(es, p, in)
			if j, dup := first[in.Name]; dup {
				es.Add(p+".name", "%q is already used by inputs[%d]; input names must be unique", in.Name, j)
			} else {
				first[in.Name] = i
			}
			continue
		}
		switch {
		case in.Name == "":
			es.Add(p+".name", "is required; name the dataset, e.g. \"imagenet\"")
		case len(in.Name) > MaxNameLen || !nameRE.MatchString(in.Name):
			es.Add(p+".name", "%q is not allowed: use 1–63 lowercase letters, digits and '-', starting and ending with a letter or digit, e.g. %q", in.Name, slug(in.Name, "imagenet"))
		default:
			if j, dup := first[in.Name]; dup {
				es.Add(p+".name", "%q is already used by inputs[%d]; input names must be unique", in.Name, j)
			} else {
				first[in.Name] = i
			}
		}
		if in.Path == "" {
			es.Add(p+".path", "is required; give the absolute path of the dataset, e.g. /data/imagenet")
		} else {
			checkAbsClean(es, p+".path", in.Path, "")
		}
		if strings.TrimSpace(in.Version) == "" {
			es.Add(p+".version", "is required; pin the dataset version, e.g. v2, so the run can be reproduced")
		} else if msg := textProblem(in.Version); msg != "" {
			es.Add(p+".version", "%s", msg)
		}
	}
}

func checkOutputs(es *domain.FieldErrors, o domain.Outputs) {
	v := o.Path
	if v == "" {
		return
	}
	const p = "outputs.path"
	switch {
	case textProblem(v) != "":
		es.Add(p, "%s, which a path cannot hold", textProblem(v))
	case !path.IsAbs(v):
		es.Add(p, "%q is not an absolute path; use e.g. /results/%s, or leave outputs.path out to let the platform choose", v, JobOutputPlaceholder)
	case slices.Contains(strings.Split(v, "/"), ".."):
		es.Add(p, "%q contains \"..\"; write the directory without it", v)
	case !strings.Contains(v, JobOutputPlaceholder):
		es.Add(p, "%q does not contain %s, so two jobs would write to the same place; add it, e.g. %q", v, JobOutputPlaceholder, path.Join(v, JobOutputPlaceholder))
	case !slices.Contains(strings.Split(v, "/"), JobOutputPlaceholder):
		es.Add(p, "%q has %s inside a directory name; make it a directory of its own, e.g. %q", v, JobOutputPlaceholder, path.Join(path.Dir(v), JobOutputPlaceholder))
	}
}

func checkParams(es *domain.FieldErrors, params map[string]string) {
	byEnv := map[string]string{}
	for _, k := range sortedKeys(params) {
		p := "params." + k
		if !paramRE.MatchString(k) {
			es.Add(p, "%q is not a valid parameter name: use letters, digits and '_', not starting with a digit (it becomes TRAINYARD_PARAM_<NAME>)", k)
			continue
		}
		up := strings.ToUpper(k)
		if other, dup := byEnv[up]; dup {
			es.Add(p, "collides with params.%s: both become TRAINYARD_PARAM_%s; rename one", other, up)
			continue
		}
		byEnv[up] = k
		if msg := textProblem(params[k]); msg != "" {
			es.Add(p, "%s, which an environment variable cannot hold", msg)
		}
	}
}

// reservedEnv explains why name may not be set by a job, or returns "".
func reservedEnv(name string) string {
	switch {
	case strings.HasPrefix(name, ReservedEnvPrefix):
		return "names starting with TRAINYARD_ are reserved for the variables the platform sets; pass run parameters as params instead"
	case name == "CUDA_VISIBLE_DEVICES":
		return "is reserved: the platform sets it to the GPUs assigned to the job; request GPUs with resources.gpus instead"
	}
	return ""
}

func checkEnvVars(es *domain.FieldErrors, vars map[string]string) {
	for _, k := range sortedKeys(vars) {
		p := "env_vars." + k
		if !paramRE.MatchString(k) {
			es.Add(p, "%q is not a valid variable name: use letters, digits and '_', not starting with a digit", k)
			continue
		}
		if msg := reservedEnv(k); msg != "" {
			es.Add(p, "%s", msg)
			continue
		}
		if msg := textProblem(vars[k]); msg != "" {
			es.Add(p, "%s, which an environment variable cannot hold", msg)
		}
	}
}

func checkSecrets(es *domain.FieldErrors, secrets []string, vars map[string]string) {
	first := map[string]int{}
	for i, name := range secrets {
		p := fmt.Sprintf("secrets[%d]", i)
		if !secretRE.MatchString(name) {
			es.Add(p, "%q is not a valid secret name: use uppercase letters, digits and '_', not starting with a digit, e.g. WANDB_API_KEY", name)
			continue
		}
		if j, dup := first[name]; dup {
			es.Add(p, "%q is already listed as secrets[%d]; list each secret once", name, j)
			continue
		}
		first[name] = i
		if msg := reservedEnv(name); msg != "" {
			es.Add(p, "%s", msg)
			continue
		}
		if _, both := vars[name]; both {
			es.Add(p, "%q is also set in env_vars; a secret's value comes from the secret store, so remove it from env_vars", name)
		}
	}
}

func checkPolicy(es *domain.FieldErrors, pol domain.Policy) {
	if pol.Timeout < 0 {
		es.Add("policy.timeout", "must be 0 or more (0 means no timeout), got %s", pol.Timeout)
	}
	switch {
	case pol.Retries < 0 || pol.Retries > MaxRetries:
		es.Add("policy.retries", "must be between 0 and %d, got %d", MaxRetries, pol.Retries)
	case pol.Retries > 0 && !pol.Reentrant:
		es.Add("policy.retries", retriesNeedReentrant)
	}
	if pol.LogLimit != 0 && pol.LogLimit < domain.MinLogLimit {
		es.Add("policy.log_limit", "must be at least %s (or 0 for the pool's limit), got %s", domain.ByteSize(domain.MinLogLimit), pol.LogLimit)
	}
	if pol.Preemptible && !pol.Reentrant {
		es.Add("policy.preemptible", "a preemptible job is stopped and run again from its checkpoint, so it must be re-entrant; set policy.reentrant: true, or remove policy.preemptible")
	}
	checkStop(es, pol)
	if pol.Priority.Rank() < 0 {
		names := make([]string, 0, 4)
		for _, p := range domain.Priorities() {
			names = append(names, string(p))
		}
		es.Add("policy.priority", "%q is not a priority; use one of %s", string(pol.Priority), strings.Join(names, ", "))
	}
}

// checkStop checks how the job is stopped: its grace period, its warning
// before the timeout and who gets the signals.
func checkStop(es *domain.FieldErrors, pol domain.Policy) {
	if pol.Grace < 0 {
		es.Add("policy.grace", "must be 0 or more (0 means the server's default), got %s", pol.Grace)
	}
	switch pol.StopSignalTo {
	case "", domain.StopGroup, domain.StopMain:
	default:
		es.Add("policy.stop_signal_to", "%q is not a stop target; use %q (every process of the job, the default) or %q (the entrypoint's process only; the rest of its process group is signalled once it exits)",
			string(pol.StopSignalTo), domain.StopGroup, domain.StopMain)
	}
	w := pol.Warn
	if w == nil {
		return
	}
	name := strings.TrimPrefix(w.Signal, "SIG")
	switch {
	case w.Signal == "":
		es.Add("policy.warn.signal", "is missing; name the signal to send before the timeout, one of %s", strings.Join(domain.WarnSignals, ", "))
	case !slices.Contains(domain.WarnSignals, name):
		es.Add("policy.warn.signal", "%q is not a warning signal; use one of %s (upper case, SIG prefix optional)", w.Signal, strings.Join(domain.WarnSignals, ", "))
	}
	switch {
	case w.Before <= 0:
		es.Add("policy.warn.before", "must be more than 0: how long before the timeout the signal is sent, e.g. 5m; got %s", w.Before)
	case pol.Timeout <= 0:
		es.Add("policy.warn", "warns before the timeout, but the job has none (policy.timeout is 0); set policy.timeout or remove policy.warn")
	case w.Before >= pol.Timeout:
		es.Add("policy.warn.before", "must be shorter than policy.timeout (%s), got %s", pol.Timeout, w.Before)
	}
}

func checkLabels(es *domain.FieldErrors, labels map[string]string) {
	for _, k := range sortedKeys(labels) {
		p := "labels." + k
		switch {
		case k == "":
			es.Add(p, "the key is empty; use e.g. team")
		case len(k) > MaxLabelLen:
			es.Add(p, "the key is %d characters long; the limit is %d", len(k), MaxLabelLen)
		case !labelKeyRE.MatchString(k):
			es.Add(p, "the key %q may use only lowercase letters, digits, '.', '_', '/' and '-', starting and ending with a letter or digit", k)
		}
		v := labels[k]
		switch {
		case !utf8.ValidString(v):
			es.Add(p, "the value is not valid UTF-8 text")
		case utf8.RuneCountInString(v) > MaxLabelLen:
			es.Add(p, "the value is %d characters long; the limit is %d", utf8.RuneCountInString(v), MaxLabelLen)
		default:
			if msg := domain.TextProblem(v, false); msg != "" {
				es.Add(p, "the value %s", msg)
			}
		}
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
