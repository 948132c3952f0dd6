package harness

import (
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// Mode is what a Proxy does to the bytes it forwards.
type Mode int

// The proxy's modes, after Toxiproxy's toxics.
const (
	// Pass forwards bytes unchanged.
	Pass Mode = iota
	// Blackhole keeps every socket open and forwards nothing: a silent
	// partition, no RST, no FIN, so only heartbeats can notice it.
	Blackhole
	// Refuse closes every new connection as soon as it is accepted;
	// connections already open keep passing.
	Refuse
)

// Proxy is a TCP proxy on loopback between a client under test and a
// service (RabbitMQ, PostgreSQL), driven from the test: it can hold the
// line silent, delay and throttle it, and reset every connection. It is
// safe for concurrent use. Start it with Listen, stop it with Close.
type Proxy struct {
	target string
	ln     net.Listener

	mu        sync.Mutex
	mode      Mode
	latency   time.Duration
	jitter    time.Duration
	bandwidth int // bytes per second per direction; 0 is unlimited
	conns     map[*link]struct{}
	accepted  int
	closed    bool
	wg        sync.WaitGroup
	changed   chan struct{} // closed and replaced when the mode changes
	rng       *rand.Rand
	done      chan struct{} // closed by Close
}

type link struct {
	client, server net.Conn
}

// Listen starts a proxy on 127.0.0.1 (a free port) forwarding to target.
func Listen(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		target:  target,
		ln:      ln,
		conns:   map[*link]struct{}{},
		changed: make(chan struct{}),
		rng:     rand.New(rand.NewPCG(1, 2)),
		done:    make(chan struct{}),
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's address, host:port, for the client to dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Accepted is how many connections the proxy has accepted so far.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Open is how many connections are open through the proxy now.
func (p *Proxy) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// SetMode switches every connection, open or new, to m.
func (p *Proxy) SetMode(m Mode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = m
	close(p.changed)
	p.changed = make(chan struct{})
}

// SetLatency delays every chunk forwarded by d ± jitter (uniform).
func (p *Proxy) SetLatency(d, jitter time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency, p.jitter = d, jitter
}

// SetBandwidth limits each direction of each connection to bytesPerSecond
// (0 lifts the limit).
func (p *Proxy) SetBandwidth(bytesPerSecond int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bandwidth = bytesPerSecond
}

// Reset closes every open connection with an RST (SO_LINGER 0) on both
// sides and returns how many it reset. New connections are accepted as
// before.
func (p *Proxy) Reset() int {
	p.mu.Lock()
	links := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		rst(l.client)
		rst(l.server)
	}
	return len(links)
}

// ResetEvery resets every open connection each period until Close or the
// returned stop function is called.
func (p *Proxy) ResetEvery(period time.Duration) (stop func()) {
	done := make(chan struct{})
	var once sync.Once
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				p.Reset()
			case <-done:
				return
			case <-p.done:
				return
			}
		}
	}()
	return func() { once.Do(func() { close(done) }) }
}

// Close stops accepting, resets every connection and waits for the
// proxy's goroutines. It is safe to call more than once.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	close(p.changed) // wake connections held in Blackhole
	p.changed = make(chan struct{})
	p.mu.Unlock()
	err := p.ln.Close()
	p.Reset()
	p.wg.Wait()
	return err
}

func rst(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.mode == Refuse || p.closed
		p.accepted++
		p.mu.Unlock()
		if refuse {
			rst(c)
			continue
		}
		s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			rst(c)
			continue
		}
		l := &link{client: c, server: s}
		p.mu.Lock()
		p.conns[l] = struct{}{}
		p.mu.Unlock()
		var both sync.WaitGroup
		both.Add(2)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			both.Wait()
			p.mu.Lock()
			delete(p.conns, l)
			p.mu.Unlock()
		}()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); defer both.Done(); p.pipe(s, c, l) }()
		go func() { defer p.wg.Done(); defer both.Done(); p.pipe(c, s, l) }()
	}
}

// pipe copies src to dst chunk by chunk, applying the current mode,
// latency and bandwidth to each chunk; when either side ends it closes
// both.
func (p *Proxy) pipe(dst, src net.Conn, l *link) {
	defer func() {
		_ = l.client.Close()
		_ = l.server.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.hold() {
				return
			}
			chunk := buf[:n]
			delay, rate := p.shape()
			if delay > 0 {
				time.Sleep(delay) // the latency injected, by design
			}
			for len(chunk) > 0 {
				part := chunk
				if rate > 0 && len(part) > rate/10+1 {
					part = part[:rate/10+1]
				}
				if _, werr := dst.Write(part); werr != nil {
					return
				}
				if rate > 0 {
					time.Sleep(time.Duration(len(part)) * time.Second / time.Duration(rate))
				}
				chunk = chunk[len(part):]
			}
		}
		if err != nil {
			return // io.EOF or a reset: either way this direction is over
		}
	}
}

// hold blocks while the proxy is in Blackhole and reports whether to go
// on forwarding (false once the proxy is closed).
func (p *Proxy) hold() bool {
	for {
		p.mu.Lock()
		mode, changed, closed := p.mode, p.changed, p.closed
		p.mu.Unlock()
		if closed {
			return false
		}
		if mode != Blackhole {
			return true
		}
		<-changed
	}
}

func (p *Proxy) shape() (time.Duration, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := p.latency
	if p.jitter > 0 {
		d += time.Duration(p.rng.Int64N(int64(2*p.jitter))) - p.jitter
	}
	if d < 0 {
		d = 0
	}
	return d, p.bandwidth
}
