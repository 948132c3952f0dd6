package harness

import (
	"encoding/binary"
	"math/rand/v2"
	"net"
	"net/url"
	"sync"
	"testing"
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
	amqp      bool          // read the broker's side as AMQP 0-9-1 frames (ListenAMQP)
	lost      int64         // confirm frames dropped (LoseConfirms)
}

type link struct {
	client, server net.Conn
	frames         *frames // the broker's frames, when the proxy reads them
}

// Listen starts a proxy on 127.0.0.1 (a free port) forwarding to target.
func Listen(target string) (*Proxy, error) { return listen(target, false) }

// ListenAMQP is Listen for a proxy to an AMQP 0-9-1 broker that reads
// the frames the broker sends, so that LoseConfirms can drop some.
func ListenAMQP(target string) (*Proxy, error) { return listen(target, true) }

func listen(target string, amqp bool) (*Proxy, error) {
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
		amqp:    amqp,
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Before puts a proxy, from listen (Listen or ListenAMQP), in front of the
// service of rawURL (amqp:// or postgres://), closed with the test, and
// returns it with the URL to dial through it.
func Before(t testing.TB, rawURL string, listen func(target string) (*Proxy, error)) (*Proxy, string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	p, err := listen(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	u.Host = p.Addr()
	return p, u.String()
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
		if p.amqp {
			l.frames = &frames{open: map[uint16]bool{}, losing: map[uint16]bool{}}
		}
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
		go func() { defer p.wg.Done(); defer both.Done(); p.pipe(s, c, l, nil) }()
		go func() { defer p.wg.Done(); defer both.Done(); p.pipe(c, s, l, l.frames) }()
	}
}

// pipe copies src to dst chunk by chunk, applying the current mode,
// latency and bandwidth to each chunk, and, given the broker's frames,
// forwarding whole frames only, less those they drop; when either side
// ends it closes both.
func (p *Proxy) pipe(dst, src net.Conn, l *link, f *frames) {
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
			if f != nil {
				var dropped int
				chunk, dropped = f.filter(chunk)
				if dropped > 0 {
					p.mu.Lock()
					p.lost += int64(dropped)
					p.mu.Unlock()
				}
			}
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

// LoseConfirms makes the publisher confirms of every channel open through
// the proxy now go missing, as RabbitMQ before 4.2 can leave a quorum
// queue's publishes unconfirmed after a node's disconnection
// (rabbitmq-server#14589): the basic.ack and basic.nack frames the broker
// sends on such a channel are dropped until the broker opens that channel
// number again (channel.open-ok, after the client closed it); channels
// opened later, and every other frame, pass. It needs a proxy from
// ListenAMQP and returns how many channels it took the confirms of.
func (p *Proxy) LoseConfirms() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for l := range p.conns {
		if l.frames != nil {
			n += l.frames.loseConfirms()
		}
	}
	return n
}

// ConfirmsLost is how many confirm frames LoseConfirms has dropped.
func (p *Proxy) ConfirmsLost() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lost
}

// frames reads one connection's broker side as AMQP 0-9-1 frames (type,
// channel, size, payload, frame-end): it keeps the channels open and
// those whose confirms are being lost.
type frames struct {
	pending []byte // the start of a frame not yet whole

	mu     sync.Mutex
	open   map[uint16]bool
	losing map[uint16]bool
}

// The methods frames looks at: class 20 (channel) and 60 (basic).
const (
	channelOpenOK  = 20<<16 | 11
	channelClose   = 20<<16 | 40
	channelCloseOK = 20<<16 | 41
	basicAck       = 60<<16 | 80
	basicNack      = 60<<16 | 120
)

// heartbeatFrame is an AMQP 0-9-1 heartbeat: type 8, channel 0, no payload.
var heartbeatFrame = []byte{8, 0, 0, 0, 0, 0, 0, 0xCE}

func (f *frames) loseConfirms() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	for ch := range f.open {
		f.losing[ch] = true
	}
	return len(f.open)
}

// filter takes the next bytes from the broker and returns the whole frames
// among them, with what came before, less the confirms being lost (a
// heartbeat instead when nothing else is left), and how many it dropped;
// the end of a frame not yet whole waits for the next call.
func (f *frames) filter(chunk []byte) ([]byte, int) {
	f.pending = append(f.pending, chunk...)
	out := make([]byte, 0, len(f.pending))
	dropped := 0
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.pending) >= 7 {
		size := int(binary.BigEndian.Uint32(f.pending[3:7]))
		if len(f.pending) < 7+size+1 {
			break
		}
		frame := f.pending[:8+size]
		f.pending = f.pending[8+size:]
		if frame[0] == 1 && size >= 4 { // a method frame
			ch := binary.BigEndian.Uint16(frame[1:3])
			switch int(binary.BigEndian.Uint16(frame[7:9]))<<16 | int(binary.BigEndian.Uint16(frame[9:11])) {
			case channelOpenOK:
				f.open[ch] = true
				delete(f.losing, ch)
			case channelClose, channelCloseOK:
				delete(f.open, ch)
			case basicAck, basicNack:
				if f.losing[ch] {
					dropped++
					continue
				}
			}
		}
		out = append(out, frame...)
	}
	if len(f.pending) > 0 {
		f.pending = append([]byte(nil), f.pending...) // let the chunk's array go
	}
	if dropped > 0 && len(out) == 0 {
		// A broker that sends no confirms sends heartbeats when it has
		// nothing else to send; this one was busy sending the confirms
		// dropped, so the client would hear nothing and time out.
		out = append(out, heartbeatFrame...)
	}
	return out, dropped
}
