package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// State is what a Conn is doing, for readiness checks.
type State int32

// The states of a Conn.
const (
	// StateConnecting: Open has not connected yet.
	StateConnecting State = iota
	// StateConnected: a connection is up.
	StateConnected
	// StateReconnecting: the connection was lost and is being redialled.
	StateReconnecting
	// StateClosed: Close was called.
	StateClosed
)

// String returns the state as a word: connecting, connected, reconnecting, closed.
func (s State) String() string {
	switch s {
	case StateConnecting:
		return "connecting"
	case StateConnected:
		return "connected"
	case StateReconnecting:
		return "reconnecting"
	case StateClosed:
		return "closed"
	}
	return fmt.Sprintf("State(%d)", int32(s))
}

// ConnOptions configures a Conn. The zero value of every field but Name
// selects the default given with it.
type ConnOptions struct {
	// Name is the connection name the broker shows (client property
	// connection_name), e.g. "acemq-flow publish". Default "acemq-flow".
	Name string
	// Log receives lifecycle events; nil discards them.
	Log *slog.Logger
	// Heartbeat is the AMQP heartbeat interval; a silent partition is noticed
	// after about three of them. Default 5s. A heartbeat in the URL wins.
	Heartbeat time.Duration
	// DialTimeout bounds one dial, TCP connect and AMQP handshake. Default 10s.
	DialTimeout time.Duration
	// OpTimeout bounds each blocking protocol call made by this package
	// (channel open, qos, consume, confirm, declare). Default 10s.
	OpTimeout time.Duration
	// BackoffMin and BackoffMax bound the delay between reconnect attempts,
	// which doubles per failed attempt, with jitter. Defaults 100ms and 10s.
	BackoffMin, BackoffMax time.Duration
	// Management is the base URL of the broker's management HTTP API, where
	// a Topology on this Conn reads the type, arguments and bindings of
	// queues and exchanges to name every way they differ from a
	// declaration (Topology.Check). Without a user and password in it, the
	// AMQP URL's are used. Default: derived from the AMQP URL,
	// http://host:15672 (https://host:15671 for amqps). ManagementOff, or
	// an API that does not answer, leaves the Topology reading drift from
	// the broker's refusals, which name one setting at a time. The password
	// is never logged.
	Management string
}

func (o *ConnOptions) defaults() {
	if o.Name == "" {
		o.Name = "acemq-flow"
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = 5 * time.Second
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 10 * time.Second
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = 10 * time.Second
	}
	if o.BackoffMin <= 0 {
		o.BackoffMin = 100 * time.Millisecond
	}
	if o.BackoffMax < o.BackoffMin {
		o.BackoffMax = max(10*time.Second, o.BackoffMin)
	}
}

// Conn is a named AMQP connection that redials by itself, with capped
// exponential backoff and jitter, whenever the connection dies (broker
// restart, a forced close, a missed heartbeat), to the next of its URLs
// when it has several (OpenURLs). Channels do not survive a reconnect:
// Publisher and Consumer open new ones and carry on.
//
// A Conn is safe for concurrent use. A URL is never logged or put in an
// error except redacted (see redactURL).
type Conn struct {
	eps  []*endpoint  // the broker URLs, tried in order (urls.go)
	at   atomic.Int32 // the index in eps of the current connection, or of the last one
	pass []string     // every endpoint's password as written and decoded, for scrub
	opts ConnOptions
	log  *slog.Logger

	mu    sync.Mutex
	cur   *amqp.Connection
	sock  net.Conn      // cur's socket, for a close the broker does not answer
	ready chan struct{} // closed while cur != nil; replaced when the connection is lost
	lost  chan struct{} // closed when the supervisor gives cur up

	state      atomic.Int32
	reconnects atomic.Int64

	blockMu     sync.Mutex                    // serializes setBlocked; guards blockedAt and blockReason
	unblocked   atomic.Pointer[chan struct{}] // closed while the broker is not blocking publishes; read per publish, without a lock
	blockedAt   time.Duration                 // mono() when the broker blocked the connection; 0 while not blocked
	blockReason string                        // the broker's reason, "low on memory"

	heartbeat atomic.Int64 // the heartbeat negotiated with the broker, a time.Duration
	lastTick  atomic.Int64 // mono() of the liveness watcher's last tick (health.go)
	resumed   atomic.Int64 // mono() when the watcher last found the process resumed from a stall

	closing   chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// Open connects to the broker at rawURL and returns a Conn that stays
// connected until Close. rawURL may hold several URLs separated by commas
// (SplitURLs), the nodes of a cluster: see OpenURLs. If no broker answers,
// Open keeps trying with backoff until ctx ends, and then returns the last
// error. The caller closes the Conn.
func Open(ctx context.Context, rawURL string, opts ConnOptions) (*Conn, error) {
	return OpenURLs(ctx, SplitURLs(rawURL), opts)
}

// OpenURLs is Open with the broker URLs as a list. It connects to the first
// that answers, trying them in order; when that connection is lost it
// redials the next in the list, round robin, with the backoff growing per
// failed attempt, so that a Conn given every node of a cluster follows the
// nodes that run. A URL that refuses the user or the vhost at the first
// connection is skipped; if every one refuses, OpenURLs returns the
// refusals at once.
func OpenURLs(ctx context.Context, rawURLs []string, opts ConnOptions) (*Conn, error) {
	opts.defaults()
	if len(rawURLs) == 0 {
		return nil, fmt.Errorf("connection %q: no broker URL; give one, amqp://user:password@host:port/vhost, or several separated by commas", opts.Name)
	}
	c := &Conn{
		opts:    opts,
		ready:   make(chan struct{}),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
	}
	for _, raw := range rawURLs {
		ep, err := newEndpoint(raw, opts.Name, opts)
		if err != nil {
			return nil, err
		}
		c.eps = append(c.eps, ep)
		c.pass = append(c.pass, ep.pass...)
	}
	open := make(chan struct{})
	close(open)
	c.unblocked.Store(&open)
	c.log = opts.Log.With("connection", opts.Name)

	ac, err := c.dialRetry(ctx, 0, 0)
	if err != nil {
		return nil, err
	}
	c.setConnected(ac)
	c.log.Info("connection opened", "url", c.ep().redacted, "node", c.ep().node)
	c.lastTick.Store(int64(mono()))
	go c.supervise(ac)
	go c.watchLiveness()
	return c, nil
}

// Name returns the connection name the broker shows.
func (c *Conn) Name() string { return c.opts.Name }

// URL returns the broker URL connected to (or last connected to, while
// reconnecting) with its password redacted.
func (c *Conn) URL() string { return c.ep().redacted }

// Management returns the management API URL a Topology on this Conn reads,
// with its password redacted, or "" for ManagementOff.
func (c *Conn) Management() string {
	m := c.mgmtAPI()
	if m == nil {
		return ""
	}
	return m.shown
}

// State returns what the connection is doing now.
func (c *Conn) State() State { return State(c.state.Load()) }

// Reconnects returns how many times the connection was re-established after
// being lost.
func (c *Conn) Reconnects() int64 { return c.reconnects.Load() }

// Blocked reports whether the broker is blocking publishes on this connection
// (a memory or disk alarm, connection.blocked). Health says since when.
func (c *Conn) Blocked() bool {
	select {
	case <-*c.unblocked.Load():
		return false
	default:
		return true
	}
}

// Close closes the connection and stops reconnecting. It is idempotent.
// Channels opened on the Conn close with it.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() { close(c.closing) })
	<-c.done
	return nil
}

// Channel opens a channel on the current connection, waiting for a
// reconnect in progress. It gives up when ctx ends, and after OpTimeout for
// the open itself; a connection that cannot open a channel in time is
// presumed dead and is closed, so it gets redialled. The caller owns and
// closes the channel, and must drain any Notify* channel it registers.
func (c *Conn) Channel(ctx context.Context) (*amqp.Channel, error) {
	ac, err := c.current(ctx)
	if err != nil {
		return nil, err
	}
	res := make(chan chanResult, 1)
	go func() {
		ch, err := ac.Channel()
		res <- chanResult{ch, err}
	}()
	t := time.NewTimer(c.opts.OpTimeout)
	defer t.Stop()
	select {
	case r := <-res:
		if r.err != nil {
			return nil, fmt.Errorf("open channel on connection %q: %w", c.opts.Name, r.err)
		}
		return r.ch, nil
	case <-ctx.Done():
		go closeLate(res)
		return nil, fmt.Errorf("open channel on connection %q: %w", c.opts.Name, ctx.Err())
	case <-t.C:
		go closeLate(res)
		c.log.Warn("channel open timed out; closing the connection to redial", "duration", c.opts.OpTimeout)
		go ac.CloseDeadline(time.Now().Add(time.Second))
		return nil, fmt.Errorf("open channel on connection %q: no answer within %s", c.opts.Name, c.opts.OpTimeout)
	}
}

type chanResult struct {
	ch  *amqp.Channel
	err error
}

// closeLate closes a channel whose open was abandoned, if it ever opens.
func closeLate(res <-chan chanResult) {
	if r := <-res; r.ch != nil {
		_ = r.ch.Close()
	}
}

// current returns the live connection, waiting while reconnecting.
func (c *Conn) current(ctx context.Context) (*amqp.Connection, error) {
	for {
		c.mu.Lock()
		ac, ready, lost := c.cur, c.ready, c.lost
		c.mu.Unlock()
		if c.State() == StateClosed {
			return nil, ErrClosed
		}
		if ac != nil && !ac.IsClosed() {
			return ac, nil
		}
		select {
		case <-ready:
		case <-c.closing:
			return nil, ErrClosed
		case <-ctx.Done():
			return nil, fmt.Errorf("connection %q: waiting for the broker: %w", c.opts.Name, ctx.Err())
		}
		if ac != nil {
			// cur is dead but the supervisor has not noticed yet: wait until
			// it has, and has replaced the ready channel.
			select {
			case <-lost:
			case <-c.closing:
				return nil, ErrClosed
			case <-ctx.Done():
				return nil, fmt.Errorf("connection %q: waiting for the broker: %w", c.opts.Name, ctx.Err())
			}
		}
	}
}

// waitUnblocked returns once the broker is not blocking publishes.
func (c *Conn) waitUnblocked(ctx context.Context) error {
	ch := *c.unblocked.Load()
	select {
	case <-ch:
		return nil
	default:
	}
	select {
	case <-ch:
		return nil
	case <-c.closing:
		return ErrClosed
	case <-ctx.Done():
		return fmt.Errorf("connection %q is blocked by the broker (resource alarm): %w", c.opts.Name, ctx.Err())
	}
}

// setBlocked records connection.blocked (b, with the broker's reason) or
// connection.unblocked, and reports whether that changed anything: the
// broker may repeat either. It returns how long the connection was blocked
// when it is unblocked.
func (c *Conn) setBlocked(b bool, reason string) (changed bool, lasted time.Duration) {
	c.blockMu.Lock()
	defer c.blockMu.Unlock()
	cur := *c.unblocked.Load()
	select {
	case <-cur:
		if b {
			next := make(chan struct{})
			c.unblocked.Store(&next)
			c.blockedAt, c.blockReason = max(mono(), 1), reason
			return true, 0
		}
	default:
		if !b {
			close(cur)
			lasted = mono() - c.blockedAt
			c.blockedAt, c.blockReason = 0, ""
			return true, lasted
		}
	}
	return false, 0
}

func (c *Conn) setConnected(ac *amqp.Connection) {
	c.mu.Lock()
	c.cur = ac
	c.lost = make(chan struct{})
	close(c.ready)
	c.mu.Unlock()
	c.state.Store(int32(StateConnected))
}

func (c *Conn) setLost() {
	c.mu.Lock()
	c.cur = nil
	c.ready = make(chan struct{})
	if c.lost != nil {
		close(c.lost)
		c.lost = nil
	}
	c.mu.Unlock()
	c.state.Store(int32(StateReconnecting))
	if changed, lasted := c.setBlocked(false, ""); changed {
		c.log.Info("connection no longer blocked: it was lost, and its successor starts unblocked", "duration", lasted.Round(time.Millisecond))
	}
}

// closeAMQP closes ac, waiting up to OpTimeout for the broker's close-ok,
// and then closes its socket. amqp091-go's deadline for the close-ok does
// not hold: each heartbeat the broker sends pushes the socket's read
// deadline further, so a broker that reads nothing (a resource alarm) but
// still sends heartbeats kept the close waiting until it dropped the
// connection itself, twice the heartbeat later.
func (c *Conn) closeAMQP(ac *amqp.Connection, sock net.Conn) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = ac.CloseDeadline(time.Now().Add(c.opts.OpTimeout))
	}()
	t := time.NewTimer(c.opts.OpTimeout)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	c.log.Warn("the broker did not answer the connection's close; closing its socket", "duration", c.opts.OpTimeout)
	if sock != nil {
		_ = sock.Close() // the library's reader fails, and the close with it
	}
	<-done
}

// supervise watches the live connection and redials when it dies.
func (c *Conn) supervise(ac *amqp.Connection) {
	defer close(c.done)
	for {
		// Both buffered and drained until closed: the library blocks its
		// reader on an undrained notification channel.
		closes := ac.NotifyClose(make(chan *amqp.Error, 1))
		blocks := ac.NotifyBlocked(make(chan amqp.Blocking, 4))
		var cause error
	watch:
		for {
			select {
			case b, ok := <-blocks:
				if !ok {
					blocks = nil
					continue
				}
				changed, lasted := c.setBlocked(b.Active, b.Reason)
				switch {
				case !changed:
				case b.Active:
					c.log.Warn("connection blocked by the broker: a resource alarm holds its publishes, and the connection is not ready until it clears", "alarm", b.Reason)
				default:
					c.log.Info("connection unblocked by the broker", "duration", lasted.Round(time.Millisecond))
				}
			case e, ok := <-closes:
				if ok && e != nil {
					cause = e
				} else {
					cause = errors.New("connection closed")
				}
				break watch
			case <-c.closing:
				c.state.Store(int32(StateClosed))
				c.mu.Lock()
				sock := c.sock
				c.mu.Unlock()
				c.closeAMQP(ac, sock)
				c.mu.Lock()
				c.cur, c.sock = nil, nil
				c.mu.Unlock()
				c.log.Info("connection closed")
				return
			}
		}
		c.setLost()
		from := c.ep()
		c.log.Warn("connection lost; reconnecting", "node", from.node, "error", cause)
		start := time.Now()
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-c.closing:
				cancel()
			case <-ctx.Done():
			}
		}()
		// The next URL first: the node just lost is likelier down than
		// the others (round robin; one URL redials itself).
		next, err := c.dialRetry(ctx, 1, (int(c.at.Load())+1)%len(c.eps))
		cancel()
		if err != nil {
			c.state.Store(int32(StateClosed))
			c.log.Info("connection closed")
			return
		}
		ac = next
		c.reconnects.Add(1)
		c.setConnected(ac)
		if to := c.ep(); to != from {
			c.log.Warn("connection re-established on another node", "node", to.node, "from", from.node, "duration", time.Since(start).Round(time.Millisecond))
		} else {
			c.log.Warn("connection re-established", "node", to.node, "duration", time.Since(start).Round(time.Millisecond))
		}
	}
}

// dialRetry dials until it succeeds or ctx ends, the endpoints in turn from
// eps[from], and records the one connected to; it returns the last dial
// error with the context error. attempt 0 is a first connection, which
// gives up at once when every endpoint refuses it.
func (c *Conn) dialRetry(ctx context.Context, attempt, from int) (*amqp.Connection, error) {
	var last error
	refused := make([]error, len(c.eps)) // by URL, for a first connection
	nrefused := 0
	for n := attempt; ; n++ {
		i := (from + n - attempt) % len(c.eps)
		ep := c.eps[i]
		ac, err := c.dial(ctx, ep)
		if err == nil {
			c.at.Store(int32(i))
			return ac, nil
		}
		last = err
		if attempt == 0 {
			if r := c.refusal(ep, err); r != nil {
				// Waiting fixes neither a wrong password, a missing vhost
				// nor a certificate: a first connection that every URL
				// has refused fails then, not at its deadline (a URL's
				// first try may fail otherwise, a TLS alert lost to a
				// reset on a busy machine). A connection lost later
				// keeps trying (credentials can be put right while it
				// waits).
				if refused[i] == nil {
					nrefused++
				}
				if refused[i] = r; nrefused == len(c.eps) {
					return nil, errors.Join(refused...)
				}
			}
		}
		d := backoff(n, c.opts.BackoffMin, c.opts.BackoffMax)
		c.log.Warn("connect failed", "url", ep.redacted, "node", ep.node, "attempt", n+1, "error", err, "duration", d)
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (%v)", last, ctx.Err())
		case <-c.closing:
			t.Stop()
			return nil, ErrClosed
		}
	}
}

// refusal returns err as a sentence when it is the broker refusing the
// connection's user or vhost, nil otherwise.
func (c *Conn) refusal(ep *endpoint, err error) error {
	code := ReplyCode(err)
	switch {
	case errors.Is(err, amqp.ErrVhost), code == amqp.NotAllowed:
		return fmt.Errorf("connection %q: the broker at %s refused the virtual host (%v); check that it exists and that the user may use it (rabbitmqctl list_permissions -p VHOST)", c.opts.Name, ep.redacted, err)
	case errors.Is(err, amqp.ErrCredentials), errors.Is(err, amqp.ErrSASL), code == amqp.AccessRefused:
		return fmt.Errorf("connection %q: the broker at %s refused the user name and password (%v); correct them in the URL", c.opts.Name, ep.redacted, err)
	case tlsRefusal(err) != "":
		return fmt.Errorf("connection %q to %s: %s", c.opts.Name, ep.redacted, tlsRefusal(err))
	}
	return nil
}

func (c *Conn) dial(ctx context.Context, ep *endpoint) (*amqp.Connection, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.DialTimeout)
	defer cancel()
	deadline, _ := ctx.Deadline()
	props := amqp.NewConnectionProperties()
	props["product"] = "acemq-flow"
	props.SetClientConnectionName(c.opts.Name)
	var (
		sock net.Conn
		tc   *tlsConn
	)
	cfg := amqp.Config{
		Heartbeat:  c.opts.Heartbeat,
		Properties: props,
		Dial: func(network, addr string) (net.Conn, error) {
			var d net.Dialer
			nc, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// Heartbeats start only after the handshake: bound it.
			if err := nc.SetDeadline(deadline); err != nil {
				nc.Close()
				return nil, err
			}
			if ep.tls != nil {
				if tc, err = handshake(ctx, nc, ep.tls); err != nil {
					return nil, err
				}
				nc = tc
			}
			// Writes from the connection's channels share system calls.
			sock = newBatchConn(nc)
			return sock, nil
		},
	}
	ac, err := amqp.DialConfig(ep.dialURL, cfg)
	if err != nil {
		err = tc.explain(err)
		return nil, fmt.Errorf("connect %q to %s: %w", c.opts.Name, ep.redacted, c.scrub(err))
	}
	c.mu.Lock()
	c.sock = sock
	c.mu.Unlock()
	c.heartbeat.Store(int64(ac.Config.Heartbeat))
	return ac, nil
}

// scrub guarantees that an error never carries a password: an error whose
// text contains one is replaced by one with the text redacted and no chain.
func (c *Conn) scrub(err error) error { return scrubWith(c.pass, err) }

func scrubWith(pass []string, err error) error {
	text := err.Error()
	found := false
	for _, p := range pass {
		if strings.Contains(text, p) {
			text, found = strings.ReplaceAll(text, p, "xxxxx"), true
		}
	}
	if !found {
		return err
	}
	return errors.New(text)
}

// redactURL returns raw with the password replaced by xxxxx, worked out from
// the text alone so that a URL net/url misreads is redacted all the same:
// everything between "://" and the last '@' is the user information, and
// what follows its first ':' is the password. Without "://" everything
// before the last '@' goes.
func redactURL(raw string) string {
	at := strings.LastIndexByte(raw, '@')
	if at < 0 {
		return raw
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok || len(scheme)+3 > at {
		return "xxxxx" + raw[at:]
	}
	userinfo := rest[:at-len(scheme)-3]
	user, _, hasPass := strings.Cut(userinfo, ":")
	if !hasPass {
		return raw
	}
	return scheme + "://" + user + ":xxxxx" + raw[at:]
}

// atAfterHost reports whether raw has an '@' after the end of its authority
// (the first '/', '?' or '#' after "://"): a password with one of those
// characters unescaped, or an unescaped '@' in the vhost, either of which
// net/url reads otherwise than meant.
func atAfterHost(raw string) bool {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return false
	}
	end := strings.IndexAny(rest, "/?#")
	return end >= 0 && strings.LastIndexByte(rest, '@') > end
}

// backoff returns the delay before retry n (0-based): min·2ⁿ capped at max,
// of which the upper half is random, so replicas do not redial in step.
func backoff(n int, lo, hi time.Duration) time.Duration {
	d := lo
	for i := 0; i < n && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	half := d / 2
	return half + rand.N(half+1)
}

// call runs fn, a blocking amqp091-go call, and gives up after OpTimeout or
// when ctx ends. The goroutine running fn finishes on its own when the
// channel or connection closes.
func (c *Conn) call(ctx context.Context, what string, fn func() error) error {
	res := make(chan error, 1)
	go func() { res <- fn() }()
	t := time.NewTimer(c.opts.OpTimeout)
	defer t.Stop()
	select {
	case err := <-res:
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", what, ctx.Err())
	case <-t.C:
		return fmt.Errorf("%s: no answer from the broker within %s", what, c.opts.OpTimeout)
	}
}
