package harness

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// echoServer accepts connections on loopback and echoes every line back.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

func proxyTo(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := Listen(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, line string, deadline time.Duration) (string, error) {
	t.Helper()
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(deadline))
	got, err := r.ReadString('\n')
	_ = c.SetReadDeadline(time.Time{})
	return got, err
}

func TestProxyPassesBytesBothWays(t *testing.T) {
	p := proxyTo(t, echoServer(t))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := roundTrip(t, c, bufio.NewReader(c), "hello", 5*time.Second)
	if err != nil || got != "hello\n" {
		t.Fatalf("round trip through the proxy = %q, %v; want hello", got, err)
	}
	if p.Accepted() != 1 || p.Open() != 1 {
		t.Errorf("accepted %d, open %d; want 1 and 1", p.Accepted(), p.Open())
	}
}

func TestProxyBlackholeHoldsTheLineSilentThenHeals(t *testing.T) {
	p := proxyTo(t, echoServer(t))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	p.SetMode(Blackhole)
	_, err = roundTrip(t, c, r, "lost?", 300*time.Millisecond)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read during a blackhole = %v, want a timeout: no data and no close", err)
	}
	p.SetMode(Pass)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := r.ReadString('\n')
	if err != nil || got != "lost?\n" {
		t.Fatalf("after the partition heals, read %q, %v; want the held line delivered", got, err)
	}
}

func TestProxyResetSendsRSTToTheClient(t *testing.T) {
	p := proxyTo(t, echoServer(t))
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if _, err := roundTrip(t, c, r, "one", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := p.Reset(); n != 1 {
		t.Fatalf("Reset reset %d connections, want 1", n)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = r.ReadString('\n')
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("read after Reset = %v, want connection reset by peer", err)
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if got, err := roundTrip(t, c2, bufio.NewReader(c2), "two", 5*time.Second); err != nil || got != "two\n" {
		t.Errorf("a new connection after Reset: %q, %v; want it to pass", got, err)
	}
}

func TestProxyRefuseClosesNewConnections(t *testing.T) {
	p := proxyTo(t, echoServer(t))
	p.SetMode(Refuse)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		return // refused before the dial returned: the RST came first
	}
	defer c.Close()
	if _, err := roundTrip(t, c, bufio.NewReader(c), "x", 5*time.Second); err == nil {
		t.Error("a connection accepted in Refuse carried data; want it closed")
	}
}

func TestProxyLatencyDelaysEachChunk(t *testing.T) {
	p := proxyTo(t, echoServer(t))
	p.SetLatency(150*time.Millisecond, 0)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if _, err := roundTrip(t, c, bufio.NewReader(c), "slow", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// Both directions are delayed: the floor is a property of the proxy,
	// not a speed measurement.
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("a round trip with 150ms latency each way took %s, want at least 300ms", d)
	}
}

func TestProxyBandwidthThrottles(t *testing.T) {
	p := proxyTo(t, echoServer(t))
	p.SetBandwidth(20 << 10) // 20 KiB/s
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	payload := make([]byte, 10<<10)
	for i := range payload {
		payload[i] = 'a'
	}
	start := time.Now()
	if _, err := c.Write(payload); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, len(payload))); err != nil {
		t.Fatal(err)
	}
	// 10 KiB at 20 KiB/s is 0.5s in each direction; the two directions
	// overlap, and the last slice goes out before its pause.
	if d := time.Since(start); d < 350*time.Millisecond {
		t.Errorf("10 KiB through a 20 KiB/s proxy came back in %s, want at least 0.35s", d)
	}
}

func TestProxyCloseEndsEveryGoroutineEvenInABlackhole(t *testing.T) {
	p, err := Listen(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p.SetMode(Blackhole)
	_, _ = c.Write([]byte("held\n"))
	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return within 10s with a connection held in a blackhole")
	}
	if err := p.Close(); err != nil {
		t.Errorf("a second Close = %v, want nil", err)
	}
}

// method is an AMQP 0-9-1 method frame on ch with the given class and
// method ids and arguments.
func method(ch uint16, class, id uint16, args ...byte) []byte {
	payload := binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, class), id)
	payload = append(payload, args...)
	f := []byte{1}
	f = binary.BigEndian.AppendUint16(f, ch)
	f = binary.BigEndian.AppendUint32(f, uint32(len(payload)))
	return append(append(f, payload...), 0xCE)
}

// LoseConfirms drops the confirms of the channels open when it was called
// until the broker opens the channel again; other channels and frames pass,
// a read of nothing but dropped confirms is forwarded as a heartbeat, and a
// frame split across reads is forwarded whole.
func TestFramesLoseTheConfirmsOfChannelsOpenUntilReopened(t *testing.T) {
	ack := func(ch uint16) []byte { return method(ch, 60, 80, 0, 0, 0, 0, 0, 0, 0, 1, 0) }
	heartbeat := []byte{8, 0, 0, 0, 0, 0, 0, 0xCE}
	f := &frames{open: map[uint16]bool{}, losing: map[uint16]bool{}}
	stream := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	pass := func(in, want []byte, wantDropped int) {
		t.Helper()
		got, dropped := f.filter(in)
		if !bytes.Equal(got, want) || dropped != wantDropped {
			t.Fatalf("filter gave % x and dropped %d, want % x and %d", got, dropped, want, wantDropped)
		}
	}
	pass(stream(method(1, 20, 11, 0, 0, 0, 0), ack(1)), stream(method(1, 20, 11, 0, 0, 0, 0), ack(1)), 0)
	if n := f.loseConfirms(); n != 1 {
		t.Fatalf("loseConfirms took %d channels, want the 1 open", n)
	}
	pass(stream(method(2, 20, 11, 0, 0, 0, 0), ack(1), heartbeat, ack(2), method(1, 60, 120, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0)),
		stream(method(2, 20, 11, 0, 0, 0, 0), heartbeat, ack(2)), 2)
	pass(ack(1), heartbeat, 1) // the line is kept alive, as a broker with nothing to send keeps it
	whole := ack(2)
	pass(whole[:5], nil, 0)
	pass(whole[5:], whole, 0)
	pass(stream(method(1, 20, 41), method(1, 20, 11, 0, 0, 0, 0), ack(1)), stream(method(1, 20, 41), method(1, 20, 11, 0, 0, 0, 0), ack(1)), 0)
	if n := f.loseConfirms(); n != 2 {
		t.Fatalf("loseConfirms took %d channels, want the 2 open", n)
	}
}

// Through the real broker: a channel in confirm mode gets its confirms
// until LoseConfirms, none after, and a channel opened again gets its own.
func TestProxyLosesTheBrokersConfirms(t *testing.T) {
	raw := os.Getenv(AMQPEnv)
	if raw == "" {
		t.Skipf("%s is unset; run `make services` and set it to run the proxy against the broker", AMQPEnv)
	}
	p, through := Before(t, raw, ListenAMQP)
	conn, err := amqp.Dial(through)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	q := "proxy-confirms-" + Random(4)
	publish := func(ch *amqp.Channel) *amqp.DeferredConfirmation {
		t.Helper()
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", q, false, false, amqp.Publishing{Body: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		return dc
	}
	confirmed := func(dc *amqp.DeferredConfirmation, within time.Duration) bool {
		if within == 0 {
			select {
			case <-dc.Done():
				return true
			default:
				return false
			}
		}
		select {
		case <-dc.Done():
			return true
		case <-time.After(within):
			return false
		}
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(q, false, false, true, false, nil); err != nil { // exclusive: gone with the connection
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	if !confirmed(publish(ch), 10*time.Second) {
		t.Fatal("no confirm through the proxy before LoseConfirms")
	}
	if n := p.LoseConfirms(); n != 1 {
		t.Fatalf("LoseConfirms took %d channels, want 1", n)
	}
	lost := publish(ch)
	deadline := time.Now().Add(10 * time.Second)
	for p.ConfirmsLost() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // the proxy has no event for a frame it dropped
	}
	if p.ConfirmsLost() != 1 || confirmed(lost, 0) {
		t.Fatalf("the publish after LoseConfirms was confirmed (dropped %d confirms)", p.ConfirmsLost())
	}
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := again.Confirm(false); err != nil {
		t.Fatal(err)
	}
	if !confirmed(publish(again), 10*time.Second) {
		t.Fatal("no confirm on a channel opened after LoseConfirms")
	}
}
