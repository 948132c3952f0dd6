package spec

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// The claim check (FLOW-FORMAT §6): a body above the threshold goes to the
// blob store and the message carries a reference.
const (
	// DefaultClaimCheckAbove is the threshold when neither the type nor
	// defaults set claim_check.above.
	DefaultClaimCheckAbove int64 = 64 << 10
	// MinClaimCheckAbove is the smallest threshold: below it the reference
	// (about 150 bytes) is not much smaller than what it replaces, and
	// offloading turns one round trip into two for nothing.
	MinClaimCheckAbove int64 = 1 << 10
	// MaxClaimCheckAbove is the largest threshold: RabbitMQ's default
	// max_message_size (3.10), so that every body that travels inline is
	// one the broker takes.
	MaxClaimCheckAbove int64 = 128 << 20
	// DefaultBlobRetention is how long the blob store keeps a blob after
	// its last put when `--blob-retention` is not given (30 days).
	DefaultBlobRetention = 30 * 24 * time.Hour
)

// ClaimCheck is a `claim_check` mapping, in `defaults` or on a type. Above
// is the threshold in bytes: a body larger than it travels by claim check.
type ClaimCheck struct {
	Pos
	Above    int64 `yaml:"above" json:"above"`
	AbovePos Pos   `yaml:"-" json:"-"`
}

// ClaimCheckAbove returns the claim-check threshold of payloads of type
// name in f: the type's claim_check.above, else defaults.claim_check.above
// (which is DefaultClaimCheckAbove unless the file sets it). An empty or
// unknown name (any JSON value, unchecked) takes the defaults'.
func (f *Flow) ClaimCheckAbove(name string) int64 {
	if t := f.types[name]; t != nil && t.ClaimCheck != nil {
		return t.ClaimCheck.Above
	}
	if f.Defaults.ClaimCheck.Above > 0 {
		return f.Defaults.ClaimCheck.Above
	}
	return DefaultClaimCheckAbove
}

// sizeUnits are the units a size may be written in: binary multiples, as
// the broker's own limits are.
var sizeUnits = map[string]int64{"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}

// ParseSize reads a size as a flow file writes it: a whole number of bytes
// (65536), or a whole number and a unit, B, KiB, MiB or GiB, with or
// without a space between them (64KiB, 1 MiB).
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	num, unit := t[:i], strings.TrimSpace(t[i:])
	mult, ok := sizeUnits[unit]
	if num == "" || !ok {
		hint := ""
		switch strings.ToLower(unit) {
		case "k", "kb", "m", "mb", "g", "gb":
			hint = fmt.Sprintf("; write %s%ciB (1 KiB is 1024 bytes)", num, strings.ToUpper(unit)[0])
		}
		return 0, fmt.Errorf("%q is not a size: write a whole number of bytes, or one with B, KiB, MiB or GiB, such as 64KiB%s", s, hint)
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is too large a size", s)
	}
	return n * mult, nil
}

// FormatSize writes n bytes in the largest unit that divides it: 64KiB,
// 1MiB, 1000B.
func FormatSize(n int64) string {
	for _, u := range []string{"GiB", "MiB", "KiB"} {
		if m := sizeUnits[u]; n >= m && n%m == 0 {
			return strconv.FormatInt(n/m, 10) + u
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// claimCheck reads a claim_check mapping; what it leaves out comes from
// base. A threshold out of range is an error at its value, naming where
// (defaults.claim_check.above).
func (b *builder) claimCheck(n *node, base ClaimCheck, where string) ClaimCheck {
	c := base
	if n == nil || n.kind != kMap {
		return c
	}
	c.Pos = n.pos
	v := n.get("above")
	if v == nil || v.kind != kScalar {
		return c
	}
	c.AbovePos = v.pos
	var size int64
	switch x := v.value.(type) {
	case int64:
		size = x
	case string:
		s, err := ParseSize(x)
		if err != nil {
			b.d.errorf(v.pos, "bad-size", "write a size such as 64KiB or 1MiB", "%s: %v", where, err)
			return c
		}
		size = s
	default:
		return c // the schema has reported it
	}
	if size < MinClaimCheckAbove || size > MaxClaimCheckAbove {
		b.d.errorf(v.pos, "claim-check-above",
			fmt.Sprintf("use a threshold from %s to %s (RabbitMQ's default max_message_size): a body above it goes to the blob store", FormatSize(MinClaimCheckAbove), FormatSize(MaxClaimCheckAbove)),
			"%s is %s, out of range", where, FormatSize(size))
		return c
	}
	c.Above = size
	return c
}

// typeClaimCheck takes a type's claim_check out of its mapping: what the
// type's node holds beside the JSON Schema (doc, the node as JSON, from
// which the key is removed so the schema never sees it). It returns nil
// when the type sets none.
func (b *builder) typeClaimCheck(name string, v *node, doc any) (*ClaimCheck, any) {
	m, ok := doc.(map[string]any)
	if !ok || v == nil || v.get("claim_check") == nil {
		return nil, doc
	}
	delete(m, "claim_check")
	c := b.claimCheck(v.get("claim_check"), ClaimCheck{Above: DefaultClaimCheckAbove}, "types."+name+".claim_check.above")
	return &c, m
}

// CheckBlobRetention warns where a message of flows could wait longer than
// retention (0: DefaultBlobRetention), the time the blob store keeps a
// claim-checked body after its last put (FLOW-FORMAT §6, `--blob-retention`):
// a retry ladder whose delays add up to more, a step delay longer, or a
// queue whose x-message-ttl is longer. A message that outlives its blob
// still carries the key but can never be read, "worse than a lost message,
// because it looks like a message" (patterns.txt, The claim check). A
// .dlq keeps its messages until someone acts, whatever the retention: that
// is for the operator to keep within it, and no warning can see it.
func CheckBlobRetention(flows []*Flow, retention time.Duration) Diagnostics {
	if retention <= 0 {
		retention = DefaultBlobRetention
	}
	d := &diags{}
	hint := fmt.Sprintf("give the runtime a --blob-retention longer than that, or shorten the wait; a claim-checked message that waits longer than %s finds its payload purged", retention)
	ladder := func(where string, r Retry) {
		if w := r.LadderWait(); w > retention {
			d.warnf(r.Pos, "blob-retention", hint, "%s: the retry ladder waits up to %s in all, longer than the blob retention %s", where, w, retention)
		}
	}
	queue := func(q *Queue) {
		if q == nil {
			return
		}
		if ttl, ok := queueTTL(q); ok && ttl > retention {
			d.warnf(q.argAt("x-message-ttl"), "blob-retention", hint, "queue %q keeps a message up to %s (x-message-ttl), longer than the blob retention %s", q.Name, ttl, retention)
		}
	}
	for _, f := range flows {
		for _, p := range f.Pipelines {
			for _, s := range p.Steps {
				ladder(fmt.Sprintf("step %q of pipeline %q", s.Name, p.Name), s.Retry)
				if s.Delay > retention {
					d.warnf(s.DelayPos, "blob-retention", hint, "step %q of pipeline %q has a delay of %s, longer than the blob retention %s", s.Name, p.Name, s.Delay, retention)
				}
			}
		}
		for _, c := range f.Consumers {
			ladder(fmt.Sprintf("consumer %q", c.ID), c.Retry)
			queue(c.Declare)
		}
		for _, s := range f.Sagas {
			for _, st := range s.Steps {
				ladder(fmt.Sprintf("step %q of saga %q", st.Name, s.Name), st.Retry)
			}
		}
		for _, q := range f.Topology.Queues {
			queue(q)
		}
	}
	d.list.Sort()
	return d.list
}

// LadderWait is the longest a message can wait in r's retry ladder in all:
// the delays before each of its MaxAttempts-1 retries, without jitter
// (which only shortens them).
func (r Retry) LadderWait() time.Duration {
	var total time.Duration
	delay := r.InitialDelay
	for range max(r.MaxAttempts-1, 0) {
		step := min(delay, r.MaxDelay)
		if total > math.MaxInt64-step {
			return math.MaxInt64
		}
		total += step
		if delay < r.MaxDelay {
			delay *= 2
		}
	}
	return total
}

// queueTTL reads a queue's x-message-ttl, in milliseconds.
func queueTTL(q *Queue) (time.Duration, bool) {
	switch v := q.Arguments["x-message-ttl"].(type) {
	case int64:
		return time.Duration(v) * time.Millisecond, v > 0
	case string:
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		return time.Duration(n) * time.Millisecond, err == nil && n > 0
	}
	return 0, false
}
