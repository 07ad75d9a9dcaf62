package cli

import (
	"fmt"
	"time"

	"trainyard/internal/client"
)

// EnvRetryFor sets how long a command keeps retrying a call the server
// cannot serve for now (a duration such as 30s; 0 turns retries off).
const EnvRetryFor = "TRAINYARD_RETRY_FOR"

// retryOption makes the client repeat idempotent calls while the server
// answers 503 or refuses connections, for client.DefaultRetryFor or
// TRAINYARD_RETRY_FOR, with one line on stderr before each wait.
func (a *app) retryOption() (client.Option, error) {
	d := a.env.retryFor
	if v := a.env.getenv(EnvRetryFor); v != "" {
		parsed, err := time.ParseDuration(v)
		if err != nil || parsed < 0 {
			return nil, usageErrorf("%s=%q is not a duration; use e.g. 30s, or 0 to turn retries off", EnvRetryFor, v)
		}
		d = parsed
	}
	return client.WithRetry(client.Retry{For: d, Notify: func(n client.RetryNotice) {
		fmt.Fprintln(a.root.ErrOrStderr(), n.String())
	}}), nil
}

// probeClient is the client for what reports the server's state (version,
// shell completion): each call is tried once.
func (a *app) probeClient() (*client.Client, error) {
	c, err := a.client()
	if err != nil {
		return nil, err
	}
	return c.WithoutRetry(), nil
}
