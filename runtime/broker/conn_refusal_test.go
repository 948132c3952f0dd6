package broker

import (
	"context"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/test/testenv"
)

// A first connection whose first try fails otherwise (reset by a proxy,
// as a TLS alert can be lost to a reset on a busy machine) and whose next
// is refused fails with the refusal, not once its deadline has passed.
func TestOpenFailsOnARefusalAfterAFirstTryFailedOtherwise(t *testing.T) {
	base := testenv.AMQP(t)
	u, _ := url.Parse(base)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 0; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if n == 0 {
				c.(*net.TCPConn).SetLinger(0)
				c.Close() // a reset
				continue
			}
			b, err := net.Dial("tcp", u.Host)
			if err != nil {
				c.Close()
				continue
			}
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(b, c); b.Close() }()
			go func() { defer wg.Done(); _, _ = io.Copy(c, b); c.Close() }()
		}
	}()
	wrong := *u
	wrong.Host = ln.Addr().String()
	wrong.User = url.UserPassword("guest", "not-the-password")

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	_, err = Open(ctx, wrong.String(), ConnOptions{Name: testenv.Names(t), BackoffMin: 50 * time.Millisecond})
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "refused the user name and password") {
		t.Errorf("Open(reset, then refused) = %v (context %v), want the refusal before the deadline", err, ctx.Err())
	}
}
