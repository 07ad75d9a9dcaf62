package local

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"trainyard/internal/executor"
)

// PortRange is an inclusive range of TCP ports.
type PortRange struct {
	First, Last int
}

// DefaultPorts is the rendezvous port range when the configuration names
// none: torch.distributed's defaults (29500 for MASTER_PORT, 29400 for the
// c10d rendezvous) lie at or below its start.
var DefaultPorts = PortRange{First: 29500, Last: 29999}

// ParsePortRange parses "first-last" (or one port).
func ParsePortRange(s string) (PortRange, error) {
	a, b, found := strings.Cut(strings.TrimSpace(s), "-")
	if !found {
		b = a
	}
	first, err1 := strconv.Atoi(strings.TrimSpace(a))
	last, err2 := strconv.Atoi(strings.TrimSpace(b))
	r := PortRange{First: first, Last: last}
	if err1 != nil || err2 != nil {
		return PortRange{}, fmt.Errorf("port range %q: want first-last, e.g. 29500-29999", s)
	}
	return r, r.check()
}

func (r PortRange) check() error {
	if r.First < 1024 || r.Last > 65535 || r.First > r.Last {
		return fmt.Errorf("port range %d-%d: want 1024 <= first <= last <= 65535", r.First, r.Last)
	}
	return nil
}

func (r PortRange) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last) }

// errNoPort: every port of the range is held or busy.
var errNoPort = errors.New("no free rendezvous port")

// ports hands out one rendezvous port per attempt: never one another
// running attempt holds, never one that cannot be bound right now, and
// round-robin, so that a port just released rests before its reuse.
type ports struct {
	r    PortRange
	free func(port int) bool // the bind test

	mu     sync.Mutex
	next   int
	byPort map[int]executor.Ref
	byRef  map[executor.Ref]int
}

func newPorts(r PortRange) *ports {
	return &ports{r: r, free: bindable, next: r.First, byPort: map[int]executor.Ref{}, byRef: map[executor.Ref]int{}}
}

// bindable reports whether a TCP listener can bind port on every address
// right now, as net.Listen("tcp", ":port") would: on the IPv6 wildcard
// address taking IPv4 too, or on the IPv4 one where the machine has no
// IPv6. It uses the system calls directly because package net would link
// the C resolver into the attempt supervisor, which links this package.
func bindable(port int) bool {
	if ok, err := listenable(unix.AF_INET6, port); err == nil {
		return ok
	}
	ok, err := listenable(unix.AF_INET, port)
	return ok && err == nil
}

// listenable reports whether a TCP socket of family (unix.AF_INET6, taking
// IPv4 too, or unix.AF_INET) can listen on port of the wildcard address;
// err is set when the family cannot be used at all.
func listenable(family, port int) (bool, error) {
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	var sa unix.Sockaddr = &unix.SockaddrInet4{Port: port}
	if family == unix.AF_INET6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0); err != nil {
			return false, err
		}
		sa = &unix.SockaddrInet6{Port: port}
	}
	// As net.Listen does: a port whose last connections are in TIME_WAIT
	// can be listened on again.
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return false, err
	}
	return unix.Bind(fd, sa) == nil && unix.Listen(fd, 1) == nil, nil
}

// reserve gives ref a port (the one it holds already, if any).
func (p *ports) reserve(ref executor.Ref) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if port, ok := p.byRef[ref]; ok {
		return port, nil
	}
	n := p.r.Last - p.r.First + 1
	for range n {
		port := p.next
		if p.next++; p.next > p.r.Last {
			p.next = p.r.First
		}
		if _, held := p.byPort[port]; held || !p.free(port) {
			continue
		}
		p.byPort[port], p.byRef[ref] = ref, port
		return port, nil
	}
	return 0, fmt.Errorf("%w in %s: %d attempts hold one, and the others are in use by other programs; widen rendezvous_ports", errNoPort, p.r, len(p.byRef))
}

// hold records that ref holds port (an attempt found running), unless
// another attempt holds it.
func (p *ports) hold(ref executor.Ref, port int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, held := p.byPort[port]; held {
		return
	}
	if old, ok := p.byRef[ref]; ok {
		delete(p.byPort, old)
	}
	p.byPort[port], p.byRef[ref] = ref, port
}

// release frees the port ref holds, if any.
func (p *ports) release(ref executor.Ref) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if port, ok := p.byRef[ref]; ok {
		delete(p.byRef, ref)
		delete(p.byPort, port)
	}
}

// held returns how many ports are held.
func (p *ports) held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.byRef)
}

// masterAddr is MASTER_ADDR: the local executor runs every attempt on this
// machine, so the rank-0 node is reached on the loopback address.
const masterAddr = "127.0.0.1"

// launchEnv is l.Env with the device and rank environment of the
// placement's first node (this machine) set over anything Env says, and
// OMP_NUM_THREADS and MKL_NUM_THREADS set to resources.cpus rounded up (at
// least 1) unless Env sets them (a job's env_vars win).
func launchEnv(l executor.Launch, port int) []string {
	env := setEnv(l.Env, l.Placement.Env(0, masterAddr, port))
	if l.Resources.CPUs > 0 {
		n := strconv.Itoa(max(int(math.Ceil(l.Resources.CPUs)), 1))
		for _, k := range []string{"OMP_NUM_THREADS", "MKL_NUM_THREADS"} {
			if _, ok := getenv(env, k); !ok {
				env = append(env, k+"="+n)
			}
		}
	}
	return env
}

// setEnv returns env without the keys of kvs ("KEY=value"), then kvs.
func setEnv(env, kvs []string) []string {
	keys := make(map[string]bool, len(kvs))
	for _, kv := range kvs {
		k, _, _ := strings.Cut(kv, "=")
		keys[k] = true
	}
	out := make([]string, 0, len(env)+len(kvs))
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); !keys[k] {
			out = append(out, kv)
		}
	}
	return append(out, kvs...)
}
