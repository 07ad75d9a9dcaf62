package local

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ShimProtocol numbers the contract between the executor and its shim: the
// launch record, the attempt directory's files and the events pipe. A
// separately installed shim binary is used only when it speaks the same one;
// change the number with any change a shim of the other side would misread.
const ShimProtocol = 5 // 2: check_env, check_dir and check_note in the launch record; 3: dir in it (spares); 4: --shared; 5: inherit_env

// ShimBinary is the name of the standalone supervisor binary.
const ShimBinary = "trainyard-shim"

// protocolFlag makes a shim print its protocol and exit.
const protocolFlag = "--protocol"

func protocolLine() string { return ShimBinary + " protocol " + strconv.Itoa(ShimProtocol) }

// FindShim returns the command that starts the attempt supervisor for the
// server binary self: the standalone trainyard-shim beside it when that one
// speaks this protocol (a start costs a fraction of re-executing the whole
// server binary), otherwise self with "shim". why says, when it falls back,
// what was missing, for the operator's log.
func FindShim(self string) (cmd []string, why string) {
	fallback := []string{self, "shim"}
	cand := filepath.Join(filepath.Dir(self), ShimBinary)
	fi, err := os.Stat(cand)
	if err != nil {
		return fallback, fmt.Sprintf("no %s beside %s; each attempt re-executes the server binary instead (install both: go install ./cmd/...)", ShimBinary, self)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fallback, fmt.Sprintf("%s is not an executable file, so each attempt re-executes %s instead; make it executable (chmod 0755) or reinstall both binaries", cand, self)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, cand, protocolFlag).Output()
	if got := strings.TrimSpace(string(out)); err != nil || got != protocolLine() {
		if err != nil {
			got = err.Error()
		}
		return fallback, fmt.Sprintf("%s does not speak protocol %d (it answered %q): it is from another build, so each attempt re-executes %s instead; reinstall both binaries together", cand, ShimProtocol, got, self)
	}
	return []string{cand}, ""
}
