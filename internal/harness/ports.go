package harness

import (
	"fmt"
	"net"
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
func freeAddrs(ips []string) ([]*net.TCPAddr, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	addrs := make([]*net.TCPAddr, 0, len(ips))
	for _, ip := range ips {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			return nil, fmt.Errorf("free port on %s: %w", ip, err)
		}
		ls = append(ls, l)
		addrs = append(addrs, l.Addr().(*net.TCPAddr))
	}
	return addrs, nil
}
