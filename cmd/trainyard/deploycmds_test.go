package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// placeholders stand for what the operator fills in a command that a file
// names: alert labels, <job>.
var placeholders = strings.NewReplacer("{{ $labels.pool }}", "standard", "{{ $labels.project }}", "vision",
	"{{ $labels.job }}", "42", "<job>", "42", "<pool>", "standard", "<project>", "vision")

// deployCommand is a `trainyard ...` command in backquotes.
var deployCommand = regexp.MustCompile("`(trainyard [^`]+)`")

// The commands the Prometheus rules and Grafana dashboards tell operators
// to run are ones the CLI accepts: known subcommands, flags and argument
// counts.
func TestDeployFilesNameRealCommands(t *testing.T) {
	var files []string
	err := filepath.WalkDir(filepath.Join("..", "..", "deploy"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && !strings.HasSuffix(path, ".go") {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range deployCommand.FindAllStringSubmatch(string(b), -1) {
			found++
			args := strings.Fields(placeholders.Replace(m[1]))[1:]
			root := rootCommand()
			cmd, rest, err := root.Find(args)
			if err != nil || cmd == root {
				t.Errorf("%s: %q: no such command (%v)", f, m[1], err)
				continue
			}
			if err := cmd.ParseFlags(rest); err != nil {
				t.Errorf("%s: %q: %v", f, m[1], err)
				continue
			}
			if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
				t.Errorf("%s: %q: %v", f, m[1], err)
			}
		}
	}
	if found == 0 {
		t.Fatal("no `trainyard ...` command found under deploy/; the pattern no longer matches")
	}
}
