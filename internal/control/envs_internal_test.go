package control

import (
	"slices"
	"testing"
	"time"

	"trainyard/internal/domain"
)

func TestWithEnvironment(t *testing.T) {
	env := domain.Environment{Name: "t", Version: 1, PathPrefix: []string{"/opt/t/bin", "/opt/u/bin"},
		Vars: map[string]string{"LANG": "C.UTF-8", "OMP_NUM_THREADS": "8", "MODE": "env"}}
	tests := map[string]struct {
		base    []string
		jobVars map[string]string
		want    []string
	}{
		"prefix and variables": {
			base: []string{"PATH=/usr/bin:/bin", "HOME=/h", "LANG=C"},
			want: []string{"PATH=/opt/t/bin:/opt/u/bin:/usr/bin:/bin", "HOME=/h", "LANG=C.UTF-8", "MODE=env", "OMP_NUM_THREADS=8"},
		},
		"the job's env_vars win": {
			base:    []string{"PATH=/bin", "MODE=job"},
			jobVars: map[string]string{"MODE": "job"},
			want:    []string{"PATH=/opt/t/bin:/opt/u/bin:/bin", "MODE=job", "LANG=C.UTF-8", "OMP_NUM_THREADS=8"},
		},
		"no PATH yet": {
			base: []string{"HOME=/h"},
			want: []string{"HOME=/h", "PATH=/opt/t/bin:/opt/u/bin", "LANG=C.UTF-8", "MODE=env", "OMP_NUM_THREADS=8"},
		},
		"empty PATH": {
			base: []string{"PATH="},
			want: []string{"PATH=/opt/t/bin:/opt/u/bin", "LANG=C.UTF-8", "MODE=env", "OMP_NUM_THREADS=8"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			base := slices.Clone(tc.base)
			got := withEnvironment(base, env, tc.jobVars)
			if !slices.Equal(got, tc.want) {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
			if !slices.Equal(base, tc.base) {
				t.Errorf("the base environment was changed: %q", base)
			}
		})
	}
	// An environment that defines nothing changes nothing.
	base := []string{"PATH=/bin", "HOME=/h"}
	if got := withEnvironment(base, domain.HostEnvironment(time.Time{}), nil); !slices.Equal(got, base) {
		t.Errorf("host changed the environment: %q", got)
	}
}
