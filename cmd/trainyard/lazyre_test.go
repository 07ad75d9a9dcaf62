package main

import (
	"testing"

	"trainyard/internal/lazyre"
)

// TestLazyPatternsCompile compiles every pattern the binary's packages make
// with lazyre (they compile on first use, not at start), so that a bad one
// fails here rather than in a request.
func TestLazyPatternsCompile(t *testing.T) {
	if err := lazyre.CompileAll(); err != nil {
		t.Fatal(err)
	}
}
