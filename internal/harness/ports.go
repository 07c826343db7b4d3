package harness

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// FreePort returns a TCP port that was free on ip (a loopback address such
// as 127.0.0.1 or 127.0.0.12) when asked. Another process may take it
// before the caller binds it; the caller's child then fails to start, and
// its log says so.
func FreePort(ip string) (int, error) {
	ports, err := FreePorts(ip, 1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// FreePorts returns n distinct TCP ports that were free on ip when asked
// (see FreePort for the race).
func FreePorts(ip string, n int) ([]int, error) {
	ips := make([]string, n)
	for i := range ips {
		ips[i] = ip
	}
	addrs, err := freeAddrs(ips)
	if err != nil {
		return nil, err
	}
	ports := make([]int, n)
	for i, a := range addrs {
		ports[i] = a.Port
	}
	return ports, nil
}

// FreeAddr returns ip:port with a port that was free on ip (see FreePort).
func FreeAddr(ip string) (string, error) {
	addrs, err := freeAddrs([]string{ip})
	if err != nil {
		return "", err
	}
	return addrs[0].String(), nil
}

// freeAddrs returns one address per entry of ips, each free when asked and
// all distinct: every listener is held until all are chosen.
//
// Ports come from below the kernel's ephemeral range when it can be read:
// a port from that range, free when asked, can be taken before the caller
// binds it by any outgoing connection on the machine (another test
// package's, say), while one below it is taken only by a listener that
// asked for it.
func freeAddrs(ips []string) ([]*net.TCPAddr, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	lo, hi, fixed := fixedPortRange()
	addrs := make([]*net.TCPAddr, 0, len(ips))
	for _, ip := range ips {
		var (
			l   net.Listener
			err error
		)
		if fixed {
			for range 64 {
				port := lo + rand.IntN(hi-lo+1)
				if l, err = net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port))); err == nil {
					break
				}
			}
		}
		if l == nil {
			if l, err = net.Listen("tcp", net.JoinHostPort(ip, "0")); err != nil {
				return nil, fmt.Errorf("free port on %s: %w", ip, err)
			}
		}
		ls = append(ls, l)
		addrs = append(addrs, l.Addr().(*net.TCPAddr))
	}
	return addrs, nil
}

// fixedPortRange is the range free ports are drawn from: from 10000 up to
// just below the kernel's ephemeral ports. ok is false when the ephemeral
// range cannot be read or leaves too little room below it.
func fixedPortRange() (lo, hi int, ok bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0, false
	}
	start, err := strconv.Atoi(f[0])
	if err != nil || start-1 < 10000+1000 {
		return 0, 0, false
	}
	return 10000, start - 1, true
}
