package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"go.yaml.in/yaml/v3"
)

// DefaultServer is the server URL used when no flag, environment variable or
// config file names one; it is where `trainyard server` listens by default.
const DefaultServer = "http://127.0.0.1:7070"

// Environment variables the CLI reads.
const (
	EnvServer = "TRAINYARD_SERVER"
	EnvToken  = "TRAINYARD_TOKEN"
	// EnvCAFile names a PEM file of CA certificates to trust for an https
	// server (a private CA or a self-signed server certificate).
	EnvCAFile = "TRAINYARD_CA_FILE"
)

// fileConfig is the config file's content. Unknown keys are ignored so that
// newer files still work with older clients.
type fileConfig struct {
	Server string `yaml:"server,omitempty"`
	Token  string `yaml:"token,omitempty"`
	CAFile string `yaml:"ca_file,omitempty"`
}

// config is the resolved client configuration.
type config struct {
	Server string
	Token  string
	CAFile string
}

// ConfigPath returns the client config file's path:
// $XDG_CONFIG_HOME/trainyard/config.yaml, by default
// ~/.config/trainyard/config.yaml.
func ConfigPath() string { return configPath(os.Getenv) }

func configPath(getenv func(string) string) string {
	if d := getenv("XDG_CONFIG_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "trainyard", "config.yaml")
	}
	home := getenv("HOME")
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	return filepath.Join(home, ".config", "trainyard", "config.yaml")
}

// WriteConfig writes a client config file holding server, token and caFile
// (the certificates to trust for an https server; "" for none), readable by
// its owner only (0600), creating its directory (0700) when missing. The
// file is replaced atomically, so a reader never sees half of it.
func WriteConfig(path string, server, token, caFile string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create config directory %s: %w", dir, err)
	}
	body, err := yaml.Marshal(fileConfig{Server: server, Token: token, CAFile: caFile})
	if err != nil {
		return fmt.Errorf("encode client config: %w", err)
	}
	body = append([]byte("# Trainyard client configuration (server URL and API token). Keep it private.\n"), body...)

	f, err := os.CreateTemp(dir, ".config-*.yaml")
	if err != nil {
		return fmt.Errorf("write client config in %s: %w", dir, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after a successful rename
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("restrict permissions of %s: %w", tmp, err)
	}
	if _, err := f.Write(body); err != nil {
		f.Close()
		return fmt.Errorf("write client config %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write client config %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write client config %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("install client config %s: %w", path, err)
	}
	return nil
}

// ConfiguredServer returns the server URL the config file at path names,
// or "" when there is none (or no readable file).
func ConfiguredServer(path string) string {
	fc, err := readConfigFile(path)
	if err != nil {
		return ""
	}
	return fc.Server
}

// readConfigFile reads the config file at path; a missing file is an empty
// config.
func readConfigFile(path string) (fileConfig, error) {
	var fc fileConfig
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fc, nil
	}
	if err != nil {
		return fc, fmt.Errorf("read config file %s: %w", path, err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return fc, nil
	}
	if err := yaml.Unmarshal(b, &fc); err != nil {
		return fc, fmt.Errorf("config file %s is not valid YAML (%v); fix it, or delete it and use --server/--token or %s/%s", path, err, EnvServer, EnvToken)
	}
	return fc, nil
}

// resolveConfig picks each setting from, in order: the flag, the environment,
// the config file, the default. The file is read only when needed.
func (a *app) resolveConfig() (config, error) {
	c := config{Server: a.flags.server, Token: a.flags.token}
	if c.Server == "" {
		c.Server = a.env.getenv(EnvServer)
	}
	if c.Token == "" {
		c.Token = a.env.getenv(EnvToken)
	}
	c.CAFile = a.flags.caFile
	if c.CAFile == "" {
		c.CAFile = a.env.getenv(EnvCAFile)
	}
	if c.Server == "" || c.Token == "" || c.CAFile == "" {
		fc, err := readConfigFile(configPath(a.env.getenv))
		if err != nil {
			return c, err
		}
		if c.Server == "" {
			c.Server = fc.Server
		}
		if c.Token == "" {
			c.Token = fc.Token
		}
		if c.CAFile == "" {
			c.CAFile = fc.CAFile
		}
	}
	if c.Server == "" {
		c.Server = DefaultServer
	}
	return c, nil
}
