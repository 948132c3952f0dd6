package harness

import (
	"bufio"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
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
