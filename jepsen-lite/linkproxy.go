package main

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// linkNet is the simulated network between the nodes: one TCP proxy in front
// of each node's cluster port (the address the node advertises), and the
// rules they apply per link.
//
// A proxy tells which node a connection comes from by its source IP: node i
// binds its cluster port on, and therefore dials its peers from,
// 127.0.0.(11+i). Connections from any other address (none in practice) are
// never cut or delayed.
//
// A cut link is a blackhole, not a refusal: a new connection across it is
// accepted and held without forwarding a byte (the dialer times out, as it
// would behind a dropped route), and the connections it had are closed. Healing
// closes the held ones. A delayed link forwards every chunk d after it was
// read, in both directions, keeping order; a throttled one at most r bytes
// per second per connection and direction.
type linkNet struct {
	size    int
	mu      sync.Mutex
	cut     [][]bool
	delay   [][]time.Duration
	rate    [][]int // bytes per second, 0 unlimited
	byIP    map[string]int
	proxies []*linkProxy
	closed  bool

	accepted atomic.Int64 // connections accepted by all proxies
	held     atomic.Int64 // of which held because their link was cut
	severed  atomic.Int64 // live connections closed when their link was cut
}

type linkProxy struct {
	net    *linkNet
	dst    int
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns map[*proxConn]struct{}
	wg    sync.WaitGroup
}

type proxConn struct {
	src, dst int
	client   net.Conn
	done     chan struct{} // closed by close

	mu     sync.Mutex
	server net.Conn // nil until dialled
	held   bool     // blackholed: accepted across a cut link
	closed bool
}

func (pc *proxConn) close() {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.closed {
		return
	}
	pc.closed = true
	close(pc.done)
	_ = pc.client.Close()
	if pc.server != nil {
		_ = pc.server.Close()
	}
}

// setServer attaches the dialled connection; false (and s closed) when the
// connection was closed meanwhile.
func (pc *proxConn) setServer(s net.Conn) bool {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.closed {
		_ = s.Close()
		return false
	}
	pc.server = s
	return true
}

func (pc *proxConn) state() (forwarding, held bool) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.server != nil && !pc.closed, pc.held && !pc.closed
}

func newLinkNet(size int) *linkNet {
	n := &linkNet{size: size, byIP: map[string]int{}}
	n.cut = make([][]bool, size)
	n.delay = make([][]time.Duration, size)
	n.rate = make([][]int, size)
	for i := range size {
		n.cut[i] = make([]bool, size)
		n.delay[i] = make([]time.Duration, size)
		n.rate[i] = make([]int, size)
		n.byIP[nodeIP(i)] = i
	}
	return n
}

// listen opens the proxy of node dst on a free 127.0.0.1 port and returns
// its address; serve starts forwarding once the target is known.
func (n *linkNet) listen(dst int) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	p := &linkProxy{net: n, dst: dst, ln: ln, conns: map[*proxConn]struct{}{}}
	n.mu.Lock()
	n.proxies = append(n.proxies, p)
	n.mu.Unlock()
	return ln.Addr().String(), nil
}

// serve starts forwarding node dst's proxy to target.
func (n *linkNet) serve(dst int, target string) {
	n.mu.Lock()
	p := n.proxies[dst]
	n.mu.Unlock()
	p.target = target
	p.wg.Go(p.acceptLoop)
}

func (n *linkNet) isCut(a, b int) bool {
	if a < 0 || b < 0 {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cut[a][b]
}

func (n *linkNet) delayOf(a, b int) time.Duration {
	if a < 0 || b < 0 {
		return 0
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.delay[a][b]
}

// partition cuts every link between nodes in different groups. Nodes in no
// group keep their links.
func (n *linkNet) partition(groups ...[]int) {
	group := map[int]int{}
	for g, members := range groups {
		for _, m := range members {
			group[m] = g
		}
	}
	n.mu.Lock()
	for a := range n.size {
		for b := range n.size {
			ga, oka := group[a]
			gb, okb := group[b]
			if a != b && oka && okb && ga != gb {
				n.cut[a][b] = true
			}
		}
	}
	proxies := append([]*linkProxy(nil), n.proxies...)
	n.mu.Unlock()
	for _, p := range proxies {
		p.sever()
	}
}

// slow delays every link of node i by d, in both directions.
func (n *linkNet) slow(i int, d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for j := range n.size {
		if j != i {
			n.delay[i][j], n.delay[j][i] = d, d
		}
	}
}

// throttle limits every link of node i to bytesPerSec in each direction.
func (n *linkNet) throttle(i, bytesPerSec int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for j := range n.size {
		if j != i {
			n.rate[i][j], n.rate[j][i] = bytesPerSec, bytesPerSec
		}
	}
}

func (n *linkNet) rateOf(a, b int) int {
	if a < 0 || b < 0 {
		return 0
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.rate[a][b]
}

// heal removes every cut, delay and throttle and closes the held connections.
func (n *linkNet) heal() {
	n.mu.Lock()
	for a := range n.size {
		for b := range n.size {
			n.cut[a][b] = false
			n.delay[a][b] = 0
			n.rate[a][b] = 0
		}
	}
	proxies := append([]*linkProxy(nil), n.proxies...)
	n.mu.Unlock()
	for _, p := range proxies {
		p.releaseHeld()
	}
}

// close stops every proxy and closes every connection.
func (n *linkNet) close() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	proxies := append([]*linkProxy(nil), n.proxies...)
	n.mu.Unlock()
	for _, p := range proxies {
		_ = p.ln.Close()
		p.mu.Lock()
		for c := range p.conns {
			c.close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	}
}

func (p *linkProxy) acceptLoop() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.net.accepted.Add(1)
		src := -1
		if host, _, err := net.SplitHostPort(c.RemoteAddr().String()); err == nil {
			if i, ok := p.net.byIP[host]; ok {
				src = i
			}
		}
		pc := &proxConn{src: src, dst: p.dst, client: c, done: make(chan struct{})}
		p.mu.Lock()
		p.conns[pc] = struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.handle(pc) })
	}
}

func (p *linkProxy) forget(pc *proxConn) {
	pc.close()
	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
}

func (p *linkProxy) handle(pc *proxConn) {
	defer p.forget(pc)
	if p.net.isCut(pc.src, pc.dst) {
		// Blackhole: read and drop until the link heals (releaseHeld closes
		// the connection) or the dialer gives up.
		p.net.held.Add(1)
		pc.mu.Lock()
		pc.held = true
		pc.mu.Unlock()
		buf := make([]byte, 16<<10)
		for {
			if _, err := pc.client.Read(buf); err != nil {
				return
			}
		}
	}
	server, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		return
	}
	if !pc.setServer(server) {
		return
	}
	if p.net.isCut(pc.src, pc.dst) { // cut while dialling
		return
	}
	done := make(chan struct{}, 2)
	go func() { p.pump(pc, pc.client, server, pc.src, pc.dst); done <- struct{}{} }()
	go func() { p.pump(pc, server, pc.client, pc.dst, pc.src); done <- struct{}{} }()
	<-done
	pc.close()
	<-done
}

type chunk struct {
	data []byte
	at   time.Time
}

// pump copies from → to, holding each chunk until the link's current delay
// has passed since it was read. The channel between reader and writer is
// bounded, so a slow link pushes back on the sender.
func (p *linkProxy) pump(pc *proxConn, from, to net.Conn, a, b int) {
	ch := make(chan chunk, 64)
	go func() {
		defer close(ch)
		for {
			buf := make([]byte, 32<<10)
			k, err := from.Read(buf)
			if k > 0 {
				ch <- chunk{buf[:k], time.Now()}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range ch {
		if d := p.net.delayOf(a, b); d > 0 {
			if wait := time.Until(c.at.Add(d)); wait > 0 {
				t := time.NewTimer(min(wait, 10*time.Second))
				select {
				case <-t.C:
				case <-pc.done:
					t.Stop()
				}
			}
		}
		if _, err := to.Write(c.data); err != nil {
			pc.close()
			for range ch { // let the reader finish; it ends once closed
			}
			return
		}
		if r := p.net.rateOf(a, b); r > 0 {
			t := time.NewTimer(time.Duration(len(c.data)) * time.Second / time.Duration(r))
			select {
			case <-t.C:
			case <-pc.done:
				t.Stop()
			}
		}
	}
}

// sever closes the live connections whose link is now cut.
func (p *linkProxy) sever() {
	p.mu.Lock()
	var victims []*proxConn
	for c := range p.conns {
		if fwd, _ := c.state(); fwd && p.net.isCut(c.src, c.dst) {
			victims = append(victims, c)
		}
	}
	p.mu.Unlock()
	for _, c := range victims {
		p.net.severed.Add(1)
		c.close()
	}
}

// releaseHeld closes the blackholed connections, so their dialers notice
// at once and redial over the healed link.
func (p *linkProxy) releaseHeld() {
	p.mu.Lock()
	var held []*proxConn
	for c := range p.conns {
		if _, h := c.state(); h {
			held = append(held, c)
		}
	}
	p.mu.Unlock()
	for _, c := range held {
		c.close()
	}
}

func (n *linkNet) String() string {
	return fmt.Sprintf("link proxies: %d connections accepted, %d held by a cut, %d severed",
		n.accepted.Load(), n.held.Load(), n.severed.Load())
}
