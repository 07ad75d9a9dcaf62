// Package lazyre holds regular expressions that compile on first use, so
// that a process which never matches one, such as a CLI command or a shell
// completion, pays nothing for it at its start.
package lazyre

import (
	"regexp"
	"sync"
)

// Regexp is a regular expression compiled on its first use.
type Regexp struct {
	expr string
	get  func() *regexp.Regexp
}

var (
	mu  sync.Mutex
	all []*Regexp
)

// New returns the expression expr, to be compiled when first used. Like
// regexp.MustCompile it panics if expr does not parse, but only then;
// CompileAll checks every one made so far.
func New(expr string) *Regexp {
	r := &Regexp{expr: expr, get: sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })}
	mu.Lock()
	all = append(all, r)
	mu.Unlock()
	return r
}

// CompileAll compiles every expression made with New so far and returns
// the first error. A test of the program that links them all calls it, so
// that a bad pattern fails a test rather than a request.
func CompileAll() error {
	mu.Lock()
	rs := all[:len(all):len(all)]
	mu.Unlock()
	for _, r := range rs {
		if _, err := regexp.Compile(r.expr); err != nil {
			return err
		}
	}
	return nil
}

// Regexp returns the compiled expression.
func (r *Regexp) Regexp() *regexp.Regexp { return r.get() }

// String returns the source text of the expression.
func (r *Regexp) String() string { return r.expr }

// MatchString reports whether s contains a match.
func (r *Regexp) MatchString(s string) bool { return r.get().MatchString(s) }

// FindStringSubmatch is regexp.Regexp's FindStringSubmatch.
func (r *Regexp) FindStringSubmatch(s string) []string { return r.get().FindStringSubmatch(s) }

// FindAllStringSubmatch is regexp.Regexp's FindAllStringSubmatch.
func (r *Regexp) FindAllStringSubmatch(s string, n int) [][]string {
	return r.get().FindAllStringSubmatch(s, n)
}

// SubexpIndex is regexp.Regexp's SubexpIndex.
func (r *Regexp) SubexpIndex(name string) int { return r.get().SubexpIndex(name) }
