package broker

import (
	"fmt"
	"time"
)

// Health is what a Conn knows of its connection at one moment, for
// readiness checks and the admin API: whether it is up, whether the broker
// blocks it, and whether it is proven alive.
//
// A connection is proven alive when a frame from the broker was read within
// two heartbeats, and after the process last resumed from a stall. The
// broker sends a frame at least once a heartbeat while the connection
// lives, so a quiet socket means a partition. A process stopped (SIGSTOP,
// a frozen VM) for longer than a heartbeat finds its connections as it left
// them, while the broker has dropped them long since: until a frame is read
// after the resume, or the connection is redialled, they prove nothing.
type Health struct {
	Name  string `json:"name"`
	State string `json:"state"` // connecting, connected, reconnecting or closed
	// Node is the host:port of the broker node connected to, or last
	// connected to while reconnecting (one of several URLs: OpenURLs).
	Node string `json:"node"`
	// Blocked: the broker blocks the connection's publishes (a memory or
	// disk alarm, connection.blocked) since BlockedSince, for
	// BlockedReason as the broker gave it ("low on memory").
	Blocked       bool       `json:"blocked"`
	BlockedSince  *time.Time `json:"blocked_since,omitempty"`
	BlockedReason string     `json:"blocked_reason,omitempty"`
	// Alive: proven alive, as above; Unproven says why not.
	Alive    bool       `json:"alive"`
	Unproven string     `json:"unproven,omitempty"`
	LastRead *time.Time `json:"last_read,omitempty"` // the last frame read from the broker
	// Heartbeat is the interval negotiated with the broker.
	Heartbeat string `json:"heartbeat"`
}

// Ready reports whether the connection is up, not blocked and proven alive.
func (h Health) Ready() bool {
	return h.State == StateConnected.String() && !h.Blocked && h.Alive
}

// Why says in a sentence why the connection is not ready, or "" when it is.
func (h Health) Why() string {
	switch {
	case h.State != StateConnected.String() && h.Node != "":
		return fmt.Sprintf("connection %q is %s (last connected to %s)", h.Name, h.State, h.Node)
	case h.State != StateConnected.String():
		return fmt.Sprintf("connection %q is %s", h.Name, h.State)
	case h.Blocked:
		return fmt.Sprintf("connection %q is blocked by the broker since %s (%s): a resource alarm; free memory or disk on the broker", h.Name, h.BlockedSince.UTC().Format(time.RFC3339), h.BlockedReason)
	case !h.Alive:
		return fmt.Sprintf("connection %q is not proven alive: %s", h.Name, h.Unproven)
	}
	return ""
}

// monoEpoch anchors the package's monotonic clock: times are kept as
// durations since it, in atomics, and never jump with the wall clock.
var monoEpoch = time.Now()

func mono() time.Duration { return time.Since(monoEpoch) }

func monoTime(d time.Duration) *time.Time {
	t := monoEpoch.Add(d).Round(time.Millisecond)
	return &t
}

// stallLimit is how late the liveness watcher may tick before the process
// counts as having stalled (stopped, or starved of CPU): one heartbeat. The
// watcher ticks four times a heartbeat.
func stallLimit(heartbeat time.Duration) time.Duration {
	if heartbeat <= 0 {
		return 5 * time.Second
	}
	return heartbeat
}

// liveness is the state proven reads from: the last frame read, the
// watcher's last tick and the end of the last stall, all on the monotonic
// clock of mono.
type liveness struct {
	now, lastRead, lastTick, resumed time.Duration
	heartbeat                        time.Duration
}

// unproven returns why the connection is not proven alive, or "".
func (l liveness) unproven() string {
	limit := stallLimit(l.heartbeat)
	if idle := l.now - l.lastTick; idle > limit {
		return fmt.Sprintf("the process did not run for %s (stopped or starved of CPU), longer than the heartbeat %s; the broker may have dropped the connection meanwhile", idle.Round(time.Millisecond), limit)
	}
	if l.lastRead <= l.resumed {
		return "no frame from the broker since the process resumed from a stall; waiting for its heartbeat"
	}
	if quiet := l.now - l.lastRead; l.heartbeat > 0 && quiet > 2*l.heartbeat {
		return fmt.Sprintf("no frame from the broker for %s, more than two heartbeats (%s); a partition, or a broker that no longer answers", quiet.Round(time.Millisecond), l.heartbeat)
	}
	return ""
}

// watchLiveness ticks four times a heartbeat until the Conn is done, and
// marks a resume when a tick comes more than stallLimit after the one
// before: the process was stopped or starved, and what it knew of its
// connections is stale.
func (c *Conn) watchLiveness() {
	limit := stallLimit(time.Duration(c.heartbeat.Load()))
	t := time.NewTicker(limit / 4)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-c.done:
			return
		}
		now := mono()
		prev := time.Duration(c.lastTick.Swap(int64(now)))
		limit = stallLimit(time.Duration(c.heartbeat.Load()))
		if gap := now - prev; gap > limit {
			c.resumed.Store(int64(now))
			c.log.Warn("the process did not run for longer than the heartbeat; the connection counts as not proven alive until the broker is heard from again",
				"duration", gap.Round(time.Millisecond), "heartbeat", limit)
		}
		if p := limit / 4; p > 0 {
			t.Reset(p)
		}
	}
}

// Health returns what the Conn knows of its connection now.
func (c *Conn) Health() Health {
	h := Health{Name: c.opts.Name, State: c.State().String(), Node: c.Node()}
	hb := time.Duration(c.heartbeat.Load())
	h.Heartbeat = hb.String()
	c.blockMu.Lock()
	if c.blockedAt != 0 {
		h.Blocked, h.BlockedSince, h.BlockedReason = true, monoTime(c.blockedAt), c.blockReason
	}
	c.blockMu.Unlock()
	c.mu.Lock()
	sock, _ := c.sock.(*batchConn)
	c.mu.Unlock()
	if sock == nil || c.State() != StateConnected {
		h.Unproven = "no connection"
		return h
	}
	l := liveness{
		lastRead:  sock.lastRead(),
		lastTick:  time.Duration(c.lastTick.Load()),
		resumed:   time.Duration(c.resumed.Load()),
		heartbeat: hb,
	}
	l.now = mono() // after the loads: a tick between them must not look late
	h.LastRead = monoTime(l.lastRead)
	h.Unproven = l.unproven()
	h.Alive = h.Unproven == ""
	return h
}
