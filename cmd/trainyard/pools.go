package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"

	"go.yaml.in/yaml/v3"

	"trainyard/internal/api"
	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/service"
)

// schedulingConfig is the pools, quotas and projects part of the server
// config file. Entries have the API's shape (docs/pools.md), so one spelling
// serves the file, the API and the CLI's -o json.
type schedulingConfig struct {
	Pools    []yaml.Node `yaml:"pools"`
	Quotas   []yaml.Node `yaml:"quotas"`
	Projects []yaml.Node `yaml:"projects"`
}

// system is the server acting on its own config file.
var system = service.Principal{Subject: "system:config", Role: "admin"}

// decodeAPI converts one YAML entry into an API type through JSON, so the
// API's field names apply and unknown fields are rejected.
func decodeAPI(n *yaml.Node, v any) error {
	var generic any
	if err := n.Decode(&generic); err != nil {
		return err
	}
	b, err := json.Marshal(generic)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// applyScheduling makes the store match the config file's pools, quotas and
// projects (the file is declarative: what it names, it sets on every start;
// what it does not name, the API manages). With no pools at all, it creates
// pool "default" from the executor's inventory, without quotas: an open
// pool, where every project runs ordinary jobs and fair share divides it,
// until an admin sets a quota there (docs/pools.md).
func applyScheduling(ctx context.Context, svc *service.Service, cfg schedulingConfig, inv executor.Inventory, log *slog.Logger) error {
	for i := range cfg.Pools {
		var in apitypes.Pool
		if err := decodeAPI(&cfg.Pools[i], &in); err != nil {
			return fmt.Errorf("server config pools[%d] (line %d): %w", i, cfg.Pools[i].Line, err)
		}
		p, err := api.PoolFromDTO(in)
		if err == nil {
			_, _, err = svc.Pools.PutPool(ctx, system, p)
		}
		if err != nil {
			return fmt.Errorf("server config pools[%d] (line %d): %w", i, cfg.Pools[i].Line, err)
		}
	}
	for i := range cfg.Projects {
		var in apitypes.Project
		if err := decodeAPI(&cfg.Projects[i], &in); err != nil {
			return fmt.Errorf("server config projects[%d] (line %d): %w", i, cfg.Projects[i].Line, err)
		}
		if _, err := svc.Pools.SetProject(ctx, system, domain.Project{Name: in.Name, Shares: in.Shares}); err != nil {
			return fmt.Errorf("server config projects[%d] (line %d): %w", i, cfg.Projects[i].Line, err)
		}
	}
	for i := range cfg.Quotas {
		var in apitypes.Quota
		if err := decodeAPI(&cfg.Quotas[i], &in); err != nil {
			return fmt.Errorf("server config quotas[%d] (line %d): %w", i, cfg.Quotas[i].Line, err)
		}
		q, err := api.QuotaFromDTO(in)
		if err == nil {
			_, err = svc.Pools.SetQuota(ctx, system, q)
		}
		if err != nil {
			return fmt.Errorf("server config quotas[%d] (line %d): %w", i, cfg.Quotas[i].Line, err)
		}
	}
	pools, err := svc.Pools.ListPools(ctx, system)
	if err != nil || len(pools) > 0 {
		return err
	}
	def := domain.Pool{Name: "default", Executor: service.ExecutorLocal, Borrowing: true, Preemption: true}
	for _, n := range inv.Nodes {
		def.Nodes = append(def.Nodes, domain.Node{Name: nodeName(n.Name), CPUs: n.CPUs, Memory: n.Memory, GPUs: n.GPUs})
	}
	if _, _, err := svc.Pools.PutPool(ctx, system, def); err != nil {
		return fmt.Errorf("create the default pool from this machine's inventory: %w", err)
	}
	capacity := def.Capacity()
	log.Info("created pool default from this machine's inventory", "gpus", capacity.GPUs, "cpus", capacity.CPUs, "memory", capacity.Memory.String())
	return nil
}

// nodeName turns a host name into a valid node name: lowercase letters,
// digits and dashes, at most 63 characters.
func nodeName(host string) string {
	b := []byte(strings.ToLower(host))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			b[i] = '-'
		}
	}
	s := strings.Trim(string(b), "-")
	if len(s) > 63 {
		s = strings.Trim(s[:63], "-")
	}
	if s == "" {
		s = "local"
	}
	return s
}
