package jobspec

import "trainyard/internal/yamlcheck"

// aliases maps names people often write to the field they most likely mean.
// Keys are normalized (see normalize).
var aliases = map[string]string{
	"command":     "entrypoint",
	"cmd":         "entrypoint",
	"args":        "entrypoint",
	"argv":        "entrypoint",
	"run":         "entrypoint",
	"script":      "entrypoint",
	"image":       "env",
	"environment": "env_vars",
	"envs":        "env_vars",
	"vars":        "env_vars",
	"queue":       "pool",
	"partition":   "pool",
	"mem":         "memory",
	"ram":         "memory",
	"gpu":         "gpus",
	"cpu":         "cpus",
	"node":        "nodes",
	"replicas":    "nodes",
	"cwd":         "workdir",
	"dir":         "workdir",
	"output":      "outputs",
	"input":       "inputs",
	"parameters":  "params",
	"hyperparams": "params",
	"tags":        "labels",
	"secret":      "secrets",
	"retry":       "retries",
	"maxretries":  "retries",
	"walltime":    "timeout",
	"deadline":    "timeout",
}

// suggest returns the field of candidates most likely meant by word, or ""
// (yamlcheck.Suggest with the job spec's aliases).
func suggest(word string, candidates []string) string {
	return yamlcheck.Suggest(word, candidates, aliases)
}
