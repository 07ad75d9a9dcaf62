package domain

import "testing"

func TestEffectiveLogLimit(t *testing.T) {
	const mib = 1 << 20
	tests := map[string]struct{ job, pool, server, want ByteSize }{
		"server default":                   {0, 0, 1024 * mib, 1024 * mib},
		"pool default replaces server":     {0, 100 * mib, 1024 * mib, 100 * mib},
		"job below the pool":               {10 * mib, 100 * mib, 1024 * mib, 10 * mib},
		"job above the pool is capped":     {500 * mib, 100 * mib, 1024 * mib, 100 * mib},
		"job above the server is capped":   {2048 * mib, 0, 1024 * mib, 1024 * mib},
		"no limit anywhere":                {0, 0, 0, 0},
		"job limit on an unlimited server": {10 * mib, 0, 0, 10 * mib},
	}
	for name, tt := range tests {
		if got := EffectiveLogLimit(tt.job, tt.pool, tt.server); got != tt.want {
			t.Errorf("%s: EffectiveLogLimit(%v, %v, %v) = %v, want %v", name, tt.job, tt.pool, tt.server, got, tt.want)
		}
	}
}
