package jobspec

import (
	"encoding/json"
	"fmt"

	"trainyard/internal/domain"
)

// SchemaID is the $id of the spec document's JSON Schema.
const SchemaID = "https://trainyard.dev/schemas/jobspec.json"

// Regular expressions for the value forms the document accepts as text.
const (
	// SizePattern matches resources.memory given as text: a number with an
	// optional binary or decimal unit.
	SizePattern = `^\s*\+?([0-9]+\.?[0-9]*|\.[0-9]+)\s*(KiB|MiB|GiB|TiB|Ki|Mi|Gi|Ti|KB|MB|GB|TB|K|M|G|T|B)?\s*$`
	// DurationPattern matches durations: Go units plus a leading day count.
	DurationPattern = `^\s*(0|[-+]?([0-9]+d` + durUnits + `*|` + durUnits + `+))\s*$`
	durUnits        = `([0-9]+\.?[0-9]*(ns|us|µs|μs|ms|s|m|h)|\.[0-9]+(ns|us|µs|μs|ms|s|m|h))`
)

type obj = map[string]any

// Schema returns the JSON Schema (draft 2020-12) of the spec document,
// indented. It describes the document as written, before overrides and
// defaults: every field with its type, default, enum and pattern. Rules that
// span fields (retries need reentrant, unique names) are in descriptions.
func Schema() []byte {
	b, err := json.MarshalIndent(schema(), "", "  ")
	if err != nil {
		// Unreachable: the schema is built from maps, strings and numbers.
		panic("jobspec: encoding the schema failed: " + err.Error())
	}
	return append(b, '\n')
}

func schema() obj {
	d := Defaults()
	name := func(desc string) obj {
		return obj{"type": "string", "pattern": NamePattern, "minLength": 1, "maxLength": MaxNameLen, "description": desc}
	}
	duration := func(desc string, def string) obj {
		o := obj{"anyOf": []obj{{"type": "string", "pattern": DurationPattern}, {"const": 0}}, "description": desc + ` Forms: 90s, 30m, 24h, 2d, 1d12h; 0 for none.`}
		if def != "" {
			o["default"] = def
		}
		return o
	}
	scalarMap := func(desc string, key obj, value obj) obj {
		return obj{"type": "object", "description": desc, "propertyNames": key, "additionalProperties": value}
	}
	priorities := []string{}
	for _, p := range domain.Priorities() {
		priorities = append(priorities, string(p))
	}
	input := obj{
		"type":                 "object",
		"additionalProperties": false,
		"description":          "A versioned dataset ({name, path, version}), or another job's outputs ({from_job, path}).",
		"anyOf":                []obj{{"required": []string{"name", "path", "version"}}, {"required": []string{"from_job"}}},
		"properties": obj{
			"name":     name("Input name, unique among inputs; for from_job, default job-<id>."),
			"path":     obj{"type": "string", "description": "Absolute, clean path of the dataset; for from_job, a path inside that job's outputs (default: all of them)."},
			"version":  obj{"type": []string{"string", "number"}, "minLength": 1, "description": "Dataset version, e.g. v2; required so the run can be reproduced."},
			"from_job": obj{"type": "integer", "minimum": 1, "description": "Read this earlier job's outputs; exported as TRAINYARD_INPUT_<NAME>, recorded in lineage. Use with after: so it has finished."},
		},
	}
	dependency := obj{
		"type":                 "object",
		"additionalProperties": false,
		"required":             []string{"on"},
		"properties": obj{
			"job":   obj{"type": "integer", "minimum": 1, "description": "An earlier job's id."},
			"sweep": obj{"type": "integer", "minimum": 1, "description": "A sweep's id: its condition is about every member."},
			"on":    obj{"enum": []string{"succeeded", "ended", "failed"}, "description": "succeeded: it succeeded; ended: it ended, however; failed: it failed or was canceled. A condition that can no longer hold fails this job (DependencyFailed)."},
		},
	}
	sweepParam := obj{
		"oneOf": []obj{
			{"type": "array", "items": obj{"type": []string{"string", "number", "boolean"}}, "minItems": 1},
			{"type": "object", "additionalProperties": false, "properties": obj{
				"values": obj{"type": "array", "items": obj{"type": []string{"string", "number", "boolean"}}, "minItems": 1},
				"min":    obj{"type": "number"}, "max": obj{"type": "number"}, "log": obj{"type": "boolean"},
			}},
		},
	}

	return obj{
		"$schema":              "https://json-schema.org/draft/2020-12/schema",
		"$id":                  SchemaID,
		"title":                "Trainyard job spec",
		"description":          "A job to run: what, where, with which resources and failure policy. YAML or JSON. Unknown fields are rejected.",
		"type":                 "object",
		"additionalProperties": false,
		"required":             []string{"name", "entrypoint"},
		"properties": obj{
			"name":    name("Job name: 1–63 lowercase letters, digits and '-', starting and ending with a letter or digit."),
			"project": withDefault(name("Project the job is accounted to."), d.Project),
			"pool":    withDefault(name("Machine pool to run in."), d.Pool),
			"env": obj{
				"type":        "string",
				"pattern":     EnvPattern,
				"not":         obj{"pattern": "@[Ll][Aa][Tt][Ee][Ss][Tt]$"},
				"default":     d.Env,
				"description": `Software environment pinned to a version, "name@version" (not "latest"), or "host" for the machine's own software.`,
			},
			"entrypoint": obj{
				"description": "The program and its arguments (argv), or a string run under /bin/sh -c.",
				"oneOf": []obj{
					{"type": "array", "minItems": 1, "items": obj{"type": []string{"string", "number", "boolean"}}, "prefixItems": []obj{{"type": "string", "minLength": 1}}},
					{"type": "string", "minLength": 1},
				},
			},
			"shell": obj{
				"type":        "boolean",
				"description": "True when entrypoint runs under /bin/sh -c; then entrypoint must be [/bin/sh, -c, <command>]. Written by the platform in canonical specs; write entrypoint as a string instead.",
				"default":     false,
			},
			"workdir": obj{"type": "string", "description": "Directory the entrypoint runs in: absolute and clean. A spec file may give a path relative to its own directory; the CLI resolves it. Empty: a fresh directory per attempt."},
			"resources": obj{
				"type":                 "object",
				"additionalProperties": false,
				"description":          "What one job asks for.",
				"properties": obj{
					"gpus":   obj{"type": "integer", "minimum": 0, "default": d.Resources.GPUs, "description": "Number of GPUs."},
					"cpus":   obj{"type": "number", "exclusiveMinimum": 0, "default": d.Resources.CPUs, "description": "CPU cores; fractions allowed."},
					"memory": obj{"oneOf": []obj{{"type": "integer", "exclusiveMinimum": 0}, {"type": "string", "pattern": SizePattern}}, "default": d.Resources.Memory.String(), "description": "Memory: bytes, or a size with a unit such as 512MiB, 32GiB, 1.5Gi, 500M; more than 0."},
					"nodes":  obj{"type": "integer", "minimum": 1, "default": d.Resources.Nodes, "description": "Number of machines (gang size); 1 for a single-machine job."},
				},
			},
			"inputs": obj{
				"type":        "array",
				"description": "Versioned datasets the job reads; names are unique.",
				"items":       input,
			},
			"outputs": obj{
				"type":                 "object",
				"additionalProperties": false,
				"description":          "Where results go. Leave path out to let the platform assign <artifacts>/<project>/<name>/<job-id>/.",
				"properties": obj{
					"path": obj{"type": "string", "pattern": "^/(.*/)?\\{job_id\\}(/.*)?$", "description": "Absolute directory without '..' with {job_id} as a directory of its own, below the project's directory under the artifact root, so two jobs never share an output."},
				},
			},
			"params": scalarMap("Run parameters, exported as TRAINYARD_PARAM_<NAME> (upper-cased; names must stay unique after upper-casing). Values are kept as text.",
				obj{"pattern": ParamPattern}, obj{"type": []string{"string", "number", "boolean"}}),
			"env_vars": scalarMap("Extra environment variables. Names starting with TRAINYARD_ and CUDA_VISIBLE_DEVICES are reserved.",
				obj{"pattern": ParamPattern, "not": obj{"anyOf": []obj{{"pattern": "^TRAINYARD_"}, {"const": "CUDA_VISIBLE_DEVICES"}}}},
				obj{"type": []string{"string", "number", "boolean"}}),
			"secrets": obj{
				"type":        "array",
				"uniqueItems": true,
				"description": "Names of secrets exported as environment variables; values come from the secret store. A name may not also appear in env_vars.",
				"items":       obj{"type": "string", "pattern": SecretPattern, "not": obj{"anyOf": []obj{{"pattern": "^TRAINYARD_"}, {"const": "CUDA_VISIBLE_DEVICES"}}}},
			},
			"policy": obj{
				"type":                 "object",
				"additionalProperties": false,
				"description":          "Failure handling and ordering.",
				"properties": obj{
					"timeout":     duration("Wall-clock limit of one attempt; 0 means none.", d.Policy.Timeout.String()),
					"retries":     obj{"type": "integer", "minimum": 0, "maximum": MaxRetries, "default": 0, "description": "Attempts after a failure; more than 0 requires reentrant: true."},
					"reentrant":   obj{"type": "boolean", "default": false, "description": "The job can safely run again (it resumes from checkpoints or starts over)."},
					"priority":    obj{"type": "string", "enum": priorities, "default": string(d.Policy.Priority), "description": "Priority class, bounded by the project's quota."},
					"preemptible": obj{"type": "boolean", "default": false, "description": "The scheduler may stop the job to make room for higher-priority work."},
					"log_limit":   obj{"oneOf": []obj{{"type": "integer", "minimum": 0}, {"type": "string", "pattern": SizePattern}}, "description": "Largest log of one attempt, at least 1MiB: beyond it the log keeps its head and a rolling tail. Absent or 0: the pool's limit; a larger value is capped at the pool's limit."},
					"grace":       duration("Time between the stop signal (SIGTERM) and SIGKILL when the job is canceled, times out, is preempted or fails a health check. Absent or 0: the server's default (10s unless configured); a larger value than the server's max_grace (10m unless configured) is capped at it.", ""),
					"warn": obj{
						"type":                 "object",
						"additionalProperties": false,
						"required":             []string{"signal", "before"},
						"description":          "An advance warning signal sent 'before' the timeout (like Slurm's --signal), to the same processes as the stop signal. Needs a timeout longer than 'before'.",
						"properties": obj{
							"signal": obj{"type": "string", "enum": warnSignalNames(), "description": "The signal, e.g. USR1 (SIG prefix optional)."},
							"before": duration("How long before the timeout the signal is sent; more than 0.", ""),
						},
					},
					"stop_signal_to": obj{"type": "string", "enum": []string{string(domain.StopGroup), string(domain.StopMain)}, "default": string(domain.StopGroup),
						"description": "Who gets the stop and warning signals: group, every process of the job; main, the entrypoint's process only (the rest of its process group gets SIGTERM once it exits, or SIGKILL when the grace period ends)."},
				},
				"dependentSchemas": obj{
					"retries": obj{
						"if":   obj{"properties": obj{"retries": obj{"minimum": 1}}},
						"then": obj{"required": []string{"reentrant"}, "properties": obj{"reentrant": obj{"const": true}}},
					},
				},
			},
			"checkpoint": obj{
				"type":                 "object",
				"additionalProperties": false,
				"description":          "Checkpoint retention.",
				"properties": obj{
					"keep": obj{"type": "integer", "minimum": 0, "default": d.Checkpoint.Keep, "description": "Number of most recent checkpoints to keep."},
				},
			},
			"health": obj{
				"type":                 "object",
				"additionalProperties": false,
				"description":          "Health-check deadlines; 0 or absent disables a check.",
				"properties": obj{
					"first_progress": duration("Time from start to the first progress report.", ""),
					"stall":          duration("Longest time between two progress reports.", ""),
				},
			},
			"after": obj{
				"type":        "array",
				"maxItems":    MaxAfter,
				"description": "Jobs and sweeps this job waits for (held with reason Dependency until then).",
				"items":       dependency,
			},
			"sweep": obj{
				"type":                 "object",
				"additionalProperties": false,
				"description":          "Run a member job per combination (grid) or draw (random) of params; each gets TRAINYARD_ARRAY_INDEX and TRAINYARD_PARAM_<NAME>.",
				"properties": obj{
					"method":       obj{"enum": []string{"grid", "random"}, "default": "grid (random when count is set)"},
					"params":       obj{"type": "object", "propertyNames": obj{"pattern": ParamPattern}, "additionalProperties": sweepParam, "description": "Each swept parameter: a list of values, or {min, max, log} for random."},
					"count":        obj{"type": "integer", "minimum": 1, "maximum": MaxSweepMembers, "description": "random: how many members."},
					"seed":         obj{"type": "integer", "description": "random: the draws' seed (same seed, same members)."},
					"max_parallel": obj{"type": "integer", "minimum": 0, "description": "At most this many members queued or running at once; 0: no limit."},
					"objective": obj{"type": "object", "additionalProperties": false, "required": []string{"metric"}, "properties": obj{
						"metric": obj{"type": "string", "description": "The reported metric that ranks members."},
						"goal":   obj{"enum": []string{"minimize", "maximize"}, "default": "minimize"},
					}},
					"early_stop": obj{"type": "object", "additionalProperties": false, "description": "Stop poor members while they run (needs objective): a member whose best value by its latest step is worse than the median of the other members' means up to that step ends succeeded with reason EarlyStopped.",
						"properties": obj{
							"rule":        obj{"enum": []string{"median"}, "default": "median"},
							"min_steps":   obj{"type": "integer", "minimum": 0, "description": "Judge a member only from this step on."},
							"min_members": obj{"type": "integer", "minimum": 1, "default": 3, "description": "How many other members must have reported that far."},
						}},
				},
			},
			"labels": scalarMap(fmt.Sprintf("Free-form labels; keys and values at most %d characters.", MaxLabelLen),
				obj{"pattern": LabelKeyPattern, "maxLength": MaxLabelLen},
				obj{"type": []string{"string", "number", "boolean"}, "maxLength": MaxLabelLen}),
			"notify": notifySchema(), // notify.go
			"resume": obj{
				"type":                 "object",
				"additionalProperties": false,
				"required":             []string{"job", "checkpoint"},
				"description":          "Start from another job's checkpoint (of the same project); set by trainyard rerun --resume.",
				"properties": obj{
					"job":        obj{"type": "integer", "minimum": 1, "description": "The job whose checkpoint to start from."},
					"checkpoint": obj{"type": "string", "minLength": 1, "description": "The name of one of that job's registered checkpoints."},
				},
			},
		},
	}
}

func withDefault(o obj, def any) obj {
	o["default"] = def
	return o
}

// warnSignalNames lists the warning signals with and without the SIG prefix.
func warnSignalNames() []string {
	out := make([]string, 0, 2*len(domain.WarnSignals))
	for _, n := range domain.WarnSignals {
		out = append(out, n, "SIG"+n)
	}
	return out
}
