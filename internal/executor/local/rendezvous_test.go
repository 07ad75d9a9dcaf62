package local

import (
	"net"
	"testing"
)

// TestBindable: a port is not bindable while a listener holds it on any
// address of either family, and is again once the listener closes.
func TestBindable(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "0.0.0.0:0", "[::1]:0", "[::]:0", ":0"} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Logf("%s: %v (this machine lacks the family; skipped)", addr, err)
			continue
		}
		port := ln.Addr().(*net.TCPAddr).Port
		if bindable(port) {
			t.Errorf("port %d is held by a listener on %s, yet bindable says it is free", port, addr)
		}
		ln.Close()
		if !bindable(port) {
			t.Errorf("port %d is free after its listener on %s closed, yet bindable says it is not", port, addr)
		}
	}
}
