package broker

import (
	"context"
	"sync"
	"time"
)

// ExchangeCache remembers briefly which exchanges exist, for a publisher
// that sends to exchanges it does not declare (a routing slip's next stop,
// an outbox record): a publish to a missing exchange makes the broker close
// the channel (404), failing every publish in flight on it, so such an
// exchange is asked about first, passively, and the answer kept a while.
// It is safe for concurrent use; concurrent lookups of one name ask once.
type ExchangeCache struct {
	ask                 func(ctx context.Context, name string) (bool, error)
	trustFound, trustNo time.Duration

	mu       sync.Mutex
	answers  map[string]exchangeAnswer
	inflight map[string]*exchangeLookup
}

type exchangeAnswer struct {
	exists bool
	at     time.Time
}

type exchangeLookup struct {
	done   chan struct{}
	exists bool
	err    error
}

// NewExchangeCache asks ask (Topology.ExchangeExists) about an exchange
// when it has no answer, and trusts an answer that it exists for found and
// one that it does not for missing (0: asks again every time).
func NewExchangeCache(ask func(ctx context.Context, name string) (bool, error), found, missing time.Duration) *ExchangeCache {
	return &ExchangeCache{ask: ask, trustFound: found, trustNo: missing,
		answers: map[string]exchangeAnswer{}, inflight: map[string]*exchangeLookup{}}
}

// Exists reports whether exchange name exists, from a recent answer or by
// asking; an error means the broker could not be asked (nothing is kept).
// The default exchange ("") always exists.
func (c *ExchangeCache) Exists(ctx context.Context, name string) (bool, error) {
	if name == "" {
		return true, nil
	}
	now := time.Now()
	c.mu.Lock()
	if a, ok := c.answers[name]; ok {
		trust := c.trustNo
		if a.exists {
			trust = c.trustFound
		}
		if now.Sub(a.at) < trust {
			c.mu.Unlock()
			return a.exists, nil
		}
	}
	l, asking := c.inflight[name]
	if !asking {
		l = &exchangeLookup{done: make(chan struct{})}
		c.inflight[name] = l
	}
	c.mu.Unlock()
	if asking {
		select {
		case <-l.done:
			return l.exists, l.err
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	l.exists, l.err = c.ask(ctx, name)
	c.mu.Lock()
	delete(c.inflight, name)
	if l.err == nil {
		c.answers[name] = exchangeAnswer{exists: l.exists, at: time.Now()}
		if len(c.answers) > maxExchangeAnswers {
			c.forgetOld(time.Now())
		}
	}
	c.mu.Unlock()
	close(l.done)
	return l.exists, l.err
}

// maxExchangeAnswers bounds the cache: slips may name any number of
// exchanges.
const maxExchangeAnswers = 10000

// forgetOld drops the answers no longer trusted, and every answer when
// that is not enough; the caller holds c.mu.
func (c *ExchangeCache) forgetOld(now time.Time) {
	for name, a := range c.answers {
		if now.Sub(a.at) >= max(c.trustFound, c.trustNo) {
			delete(c.answers, name)
		}
	}
	if len(c.answers) > maxExchangeAnswers {
		clear(c.answers)
	}
}

// Forget drops every answer: the next lookup of each name asks again (an
// exchange found to exist has vanished since, say).
func (c *ExchangeCache) Forget() {
	c.mu.Lock()
	clear(c.answers)
	c.mu.Unlock()
}
