package control_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/service"
)

// The environment's check runs in the environment's own variables, never
// the job's (so a job cannot make it pass for others), and is named by
// version and digest; a check the executor skipped is said in the job's
// start transition.
func TestEnvironmentCheckLaunch(t *testing.T) {
	const note = "environment check py3@1 passed on node fake at 2026-03-01 12:00:00 UTC; not run again until 2026-03-01 13:00:00 UTC"
	ex := &executortest.Fake{Script: func(l executor.Launch) []executor.Event {
		return []executor.Event{{Kind: executor.Started, PID: 7, CheckNote: note},
			{Kind: executor.Exited, State: domain.AttemptSucceeded, Reason: domain.ReasonCompleted}}
	}}
	r := newRig(t, ex)
	env, _, err := r.svc.Envs.RegisterEnv(context.Background(), admin, service.EnvDefinition{Name: "py3",
		PathPrefix: []string{"/usr/local/bin"}, Vars: map[string]string{"MODE": "env"}, Check: []string{"python3", "-c", "import json"}})
	if err != nil {
		t.Fatal(err)
	}
	j := r.submit("name: checked\nenv: py3@1\nentrypoint: [x]\nenv_vars: {PYTHONPATH: /job/shadow, MODE: job}\n")
	r.wait(j.ID, domain.JobSucceeded)

	l := r.ex.Launches()[0]
	if !slices.Equal(l.Check, []string{"python3", "-c", "import json"}) || l.EnvRef != "py3@1" || l.EnvDigest != env.Digest || env.Digest == "" {
		t.Errorf("launch check %q, env %q digest %q; want the check of py3@1 with digest %q", l.Check, l.EnvRef, l.EnvDigest, env.Digest)
	}
	if want := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "MODE=env"}; !slices.Equal(l.CheckEnv, want) {
		t.Errorf("CheckEnv = %q; want %q (the server's and the environment's variables only)", l.CheckEnv, want)
	}
	if jobEnv := strings.Join(l.Env, "\n"); !strings.Contains(jobEnv, "PYTHONPATH=/job/shadow") || !strings.Contains(jobEnv, "MODE=job") {
		t.Errorf("the job's own environment lacks its env_vars:\n%s", jobEnv)
	}

	evs, err := r.st.ListEvents(context.Background(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	var started string
	for _, e := range evs {
		if e.To == domain.JobRunning {
			started = e.Message
		}
	}
	if want := "attempt 1 started (pid 7); " + note; started != want {
		t.Errorf("start transition %q; want %q", started, want)
	}
}
