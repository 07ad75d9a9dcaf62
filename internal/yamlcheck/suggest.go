package yamlcheck

import (
	"slices"
	"strings"
)

// normalize lowercases s and drops '-' and '_' so that "envVars", "env-vars"
// and "ENV_VARS" compare equal.
func normalize(s string) string {
	s = strings.ToLower(s)
	return strings.NewReplacer("-", "", "_", "").Replace(s)
}

// Suggest returns the candidate closest to word, or "" when none is close
// enough to be a likely typo. aliases maps names people often write
// (normalized: lowercase, without '-' and '_') to the field they most likely
// mean; nil for none. Ties go to the earlier candidate, so the answer is
// deterministic.
func Suggest(word string, candidates []string, aliases map[string]string) string {
	nw := normalize(word)
	if nw == "" {
		return ""
	}
	for _, c := range candidates {
		if normalize(c) == nw {
			return c
		}
	}
	// A known alias, or a one-letter slip of one ("comand").
	keys := make([]string, 0, len(aliases))
	for k := range aliases {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, a := range keys {
		if a == nw || (len(nw) >= 5 && levenshtein(nw, a) == 1) {
			if c := aliases[a]; slices.Contains(candidates, c) {
				return c
			}
		}
	}
	best, bestDist := "", 0
	limit := 1
	switch {
	case len(nw) > 8:
		limit = 3
	case len(nw) > 4:
		limit = 2
	}
	for _, c := range candidates {
		d := levenshtein(nw, normalize(c))
		if d <= limit && (best == "" || d < bestDist) {
			best, bestDist = c, d
		}
	}
	return best
}

// levenshtein is the edit distance between a and b, counted in bytes, where
// swapping two adjacent letters counts as one edit ("nmae" is 1 from
// "name"). Inputs are short field names; long inputs are cut to keep the
// cost bounded.
func levenshtein(a, b string) int {
	const maxLen = 64
	if len(a) > maxLen {
		a = a[:maxLen]
	}
	if len(b) > maxLen {
		b = b[:maxLen]
	}
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
