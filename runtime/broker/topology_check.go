package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Difference is one way the broker differs from what a check asked about:
// a queue, exchange or binding that is missing, or a queue or exchange that
// exists with other settings (drift).
type Difference struct {
	Kind    string  // "exchange", "queue" or "binding"
	Name    string  // the exchange or queue; for a binding, its queue
	Binding Binding // Kind "binding" only
	// Missing: it does not exist on the broker (a binding: the queue is not
	// bound to the exchange with that routing key).
	Missing bool
	// Settings are every setting that differs, when it exists: the type
	// first, then durable, auto_delete, exclusive and internal, then the
	// arguments by name.
	Settings []Setting
	// Partial: Settings were read from the broker's refusals, because the
	// management API did not answer. Those compare only what the broker
	// compares for the queue's type: an argument it ignores there (an
	// x-delivery-limit on a classic queue) is not among them.
	Partial bool
	// Refusal is a refusal this package could not read, verbatim; Settings
	// then stop before the setting it names.
	Refusal string
}

// Setting is one setting of a queue or exchange that the declaration and
// the broker disagree on.
type Setting struct {
	// Name is "type" (classic, quorum or stream for a queue; direct, topic,
	// fanout or headers for an exchange), "durable", "auto_delete",
	// "exclusive", "internal", or an argument such as "x-message-ttl".
	Name     string
	Arg      bool   // Name is an argument
	Declared string // the declared value as text; "" when the declaration has none
	Broker   string // the broker's value as text; "" when the broker has none
}

// String returns the difference as a sentence a person reads, with the fix:
//
//	queue "orders.charge" exists on the broker as a classic queue but the flow declares it quorum; arguments {x-dead-letter-exchange=acemq.dlx} here, {} there; delete the queue or declare it as it is
//
// "here" is what the flow declares, "there" what the broker has.
func (d Difference) String() string {
	if d.Missing {
		if d.Kind == "binding" {
			return fmt.Sprintf("queue %q is not bound to %s with routing key %q; bind it on the broker, or let the flow declare the binding",
				d.Binding.Queue, exchangeName(d.Binding.Exchange), d.Binding.RoutingKey)
		}
		return fmt.Sprintf("%s %q does not exist on the broker; create it on the broker, or let the flow declare it", d.Kind, d.Name)
	}
	remedy := fmt.Sprintf("delete the %s or declare it as it is", d.Kind)
	if len(d.Settings) == 0 {
		return fmt.Sprintf("%s %q exists on the broker with other settings than the flow declares (%s); %s", d.Kind, d.Name, d.Refusal, remedy)
	}
	rest := d.Settings
	var b strings.Builder
	if len(rest) > 0 && rest[0].Name == "type" && !rest[0].Arg {
		fmt.Fprintf(&b, "%s %q exists on the broker as a %s %s but the flow declares it %s", d.Kind, d.Name, rest[0].Broker, d.Kind, rest[0].Declared)
		rest = rest[1:]
		if len(rest) > 0 || d.Refusal != "" {
			b.WriteString("; ")
		}
	} else {
		fmt.Fprintf(&b, "%s %q exists on the broker with other settings than the flow declares: ", d.Kind, d.Name)
	}
	var parts []string
	var here, there []string
	for _, s := range rest {
		if !s.Arg {
			parts = append(parts, fmt.Sprintf("%s %s here, %s there", s.Name, orDefault(s.Declared, "unset"), orDefault(s.Broker, "unset")))
			continue
		}
		if s.Declared != "" {
			here = append(here, s.Name+"="+s.Declared)
		}
		if s.Broker != "" {
			there = append(there, s.Name+"="+s.Broker)
		}
	}
	if len(here)+len(there) > 0 {
		parts = append(parts, fmt.Sprintf("arguments {%s} here, {%s} there", strings.Join(here, ", "), strings.Join(there, ", ")))
	}
	if d.Refusal != "" {
		parts = append(parts, "the broker also reports "+d.Refusal)
	}
	b.WriteString(strings.Join(parts, "; "))
	return b.String() + "; " + remedy
}

// TopologyError is every difference one check found, in the order asked
// about: exchanges, queues, then bindings.
type TopologyError struct {
	Differences []Difference
}

// Error returns one sentence per difference, one per line.
func (e *TopologyError) Error() string {
	lines := make([]string, len(e.Differences))
	for i, d := range e.Differences {
		lines[i] = d.String()
	}
	return strings.Join(lines, "\n")
}

// Is reports whether target is ErrNotFound (something is missing) or
// ErrDrift (something exists with other settings).
func (e *TopologyError) Is(target error) bool {
	for _, d := range e.Differences {
		if (target == ErrNotFound && d.Missing) || (target == ErrDrift && !d.Missing) {
			return true
		}
	}
	return false
}

// Check compares exchanges, queues and bindings with the broker and creates
// and changes nothing: it is topology.apply validate. Each exchange and
// queue is asked about with a passive declare on a channel of its own (a
// refusal closes it); its type, flags and arguments are then read through
// the management API (see ConnOptions.Management) and compared one by one,
// and so are the bindings of each queue. When the API does not answer, a
// queue or exchange that exists is declared again, as asked and then as
// each refusal says the broker has it, until the broker accepts it: that
// names each setting the broker compares, and changes nothing, since the
// entity exists (one deleted between the passive and the active declare
// would be created). Bindings are then not checked; that is logged.
//
// It returns every difference, and an error that is nil when there is
// none and every check ran: a *TopologyError rendering each difference as
// a sentence, joined with each failure to check (access refused, the
// connection lost). A binding whose queue or exchange is missing is not
// reported on its own; one whose queue or exchange was not among those
// asked about has it checked too.
func (t *Topology) Check(ctx context.Context, exchanges []Exchange, queues []Queue, bindings []Binding) ([]Difference, error) {
	return t.check(ctx, exchanges, queues, bindings, false)
}

// CheckDrift checks exchanges and queues before they are declared
// (topology.apply create-only): it declares nothing, as Check, and reports
// every exchange and queue that exists with other settings, so that a
// start refused for drift has not declared the rest first. A missing one is
// not a difference here: declaring creates it. It returns nil, or a
// *TopologyError joined with each failure to check.
func (t *Topology) CheckDrift(ctx context.Context, exchanges []Exchange, queues []Queue) error {
	_, err := t.check(ctx, exchanges, queues, nil, true)
	return err
}

func (t *Topology) check(ctx context.Context, exchanges []Exchange, queues []Queue, bindings []Binding, missingOK bool) ([]Difference, error) {
	c := &checker{t: t, m: t.conn.mgmtAPI()}
	var diffs []Difference
	var errs []error
	skip := map[string]bool{} // "x:name", "q:name": missing or not checked
	checked := map[string]bool{}
	add := func(key string, d *Difference, err error) {
		checked[key] = true
		switch {
		case err != nil:
			errs = append(errs, err)
			skip[key] = true
		case d == nil:
		case d.Missing && missingOK:
			skip[key] = true
		default:
			diffs = append(diffs, *d)
			skip[key] = skip[key] || d.Missing
		}
	}
	for _, x := range exchanges {
		if x.Name == "" || checked["x:"+x.Name] {
			continue // the default exchange always exists
		}
		d, err := c.exchange(ctx, x)
		add("x:"+x.Name, d, err)
	}
	for _, q := range queues {
		if checked["q:"+q.Name] {
			continue
		}
		d, err := c.queue(ctx, q)
		add("q:"+q.Name, d, err)
	}
	var unread int
	for _, b := range bindings {
		if b.Exchange != "" && !checked["x:"+b.Exchange] {
			d, err := c.exists(ctx, "exchange", b.Exchange)
			add("x:"+b.Exchange, d, err)
		}
		if b.ToExchange != "" {
			// An exchange-to-exchange binding: both exchanges are asked
			// about; the binding itself is not read.
			if !checked["x:"+b.ToExchange] {
				d, err := c.exists(ctx, "exchange", b.ToExchange)
				add("x:"+b.ToExchange, d, err)
			}
			continue
		}
		if !checked["q:"+b.Queue] {
			d, err := c.exists(ctx, "queue", b.Queue)
			add("q:"+b.Queue, d, err)
		}
		if skip["x:"+b.Exchange] || skip["q:"+b.Queue] || b.Exchange == "" {
			continue
		}
		d, err := c.binding(ctx, b)
		if errors.Is(err, errNoManagement) {
			unread++
			continue
		}
		if err != nil {
			errs = append(errs, err)
		} else if d != nil {
			diffs = append(diffs, *d)
		}
	}
	if unread > 0 {
		c.t.log.Warn("bindings not checked: the management API does not answer", "bindings", unread, "url", c.t.conn.Management())
	}
	if ctx.Err() != nil {
		errs = append(errs, ctx.Err())
	}
	if len(diffs) > 0 {
		errs = append([]error{&TopologyError{Differences: diffs}}, errs...)
	}
	return diffs, errors.Join(errs...)
}

// errNoManagement: the management API is off or stopped answering in this
// check.
var errNoManagement = errors.New("management API not available")

// checker is one check's state: the management API is given up on for the
// rest of the check at its first failure, so an API that does not answer
// costs one timeout, not one per queue.
type checker struct {
	t        *Topology
	m        *management // nil once given up on
	bindings map[string][]mgmtBinding
}

func (c *checker) giveUp(ctx context.Context, err error) {
	if c.m == nil {
		return
	}
	level := slog.LevelDebug
	if c.m.explicit {
		level = slog.LevelWarn
	}
	c.t.log.Log(ctx, level, "management API not answering; reading drift from the broker's refusals", "url", c.m.shown, "error", err)
	c.m = nil
}

// exists asks about an exchange or queue with a passive declare.
func (c *checker) exists(ctx context.Context, kind, name string) (*Difference, error) {
	var err error
	if kind == "queue" {
		_, err = c.t.Inspect(ctx, name)
	} else {
		err = c.t.passive(ctx, fmt.Sprintf("check exchange %q", name), func(ch *amqp.Channel) error {
			return ch.ExchangeDeclarePassive(name, "direct", false, false, false, false, nil)
		})
	}
	switch {
	case err == nil:
		return nil, nil
	case errors.Is(err, ErrQueueUnavailable):
		if c.t.isAway(name, err) {
			return nil, nil
		}
	case ReplyCode(err) == amqp.NotFound:
		return &Difference{Kind: kind, Name: name, Missing: true}, nil
	}
	return nil, fmt.Errorf("check %s %q: %w", kind, name, err)
}

func (c *checker) queue(ctx context.Context, q Queue) (*Difference, error) {
	args, err := Args(q.Args)
	if err != nil {
		return nil, fmt.Errorf("check queue %q: %w", q.Name, err)
	}
	d, err := c.exists(ctx, "queue", q.Name)
	if node, down := homeNodeDown(err); down && q.Unconsumed {
		// Nothing to compare it with while its node is away.
		c.t.takeAway(q.Name, node)
		return nil, nil
	}
	if d != nil || err != nil {
		return d, err
	}
	return c.queueDrift(ctx, q, args)
}

// queueDrift names every setting of q, which exists, that differs on the
// broker: read through the management API, or else from refusals.
func (c *checker) queueDrift(ctx context.Context, q Queue, args amqp.Table) (*Difference, error) {
	d := &Difference{Kind: "queue", Name: q.Name}
	if c.m != nil {
		b, err := c.m.queue(ctx, q.Name)
		if err == nil {
			d.Settings = queueSettings(q, args, b)
			return nonEmpty(d), nil
		}
		// A 404 here, after the passive declare found it, is a queue just
		// deleted or not yet visible to the API: ask the broker instead.
		if !errors.Is(err, errManagementNotFound) {
			c.giveUp(ctx, err)
		}
	}
	d.Partial = true
	var err error
	d.Settings, d.Refusal, err = c.probe(ctx, "queue", q.Name, queueProbe(q, args))
	if err != nil {
		return nil, err
	}
	return nonEmpty(d), nil
}

func (c *checker) exchange(ctx context.Context, x Exchange) (*Difference, error) {
	args, err := Args(x.Args)
	if err != nil {
		return nil, fmt.Errorf("check exchange %q: %w", x.Name, err)
	}
	if d, err := c.exists(ctx, "exchange", x.Name); d != nil || err != nil {
		return d, err
	}
	return c.exchangeDrift(ctx, x, args)
}

func (c *checker) exchangeDrift(ctx context.Context, x Exchange, args amqp.Table) (*Difference, error) {
	d := &Difference{Kind: "exchange", Name: x.Name}
	if c.m != nil {
		b, err := c.m.exchange(ctx, x.Name)
		if err == nil {
			d.Settings = exchangeSettings(x, args, b)
			return nonEmpty(d), nil
		}
		if !errors.Is(err, errManagementNotFound) {
			c.giveUp(ctx, err)
		}
	}
	d.Partial = true
	var err error
	d.Settings, d.Refusal, err = c.probe(ctx, "exchange", x.Name, exchangeProbe(x, args))
	if err != nil {
		return nil, err
	}
	return nonEmpty(d), nil
}

func nonEmpty(d *Difference) *Difference {
	if len(d.Settings) == 0 && d.Refusal == "" {
		return nil
	}
	return d
}

// binding looks for b among its queue's bindings, which the management API
// lists (AMQP cannot ask about a binding).
func (c *checker) binding(ctx context.Context, b Binding) (*Difference, error) {
	args, err := Args(b.Args)
	if err != nil {
		return nil, fmt.Errorf("check binding of queue %q to exchange %q: %w", b.Queue, b.Exchange, err)
	}
	list, ok := c.bindings[b.Queue]
	if !ok {
		if c.m == nil {
			return nil, errNoManagement
		}
		list, err = c.m.bindings(ctx, b.Queue)
		if err != nil {
			if !errors.Is(err, errManagementNotFound) {
				c.giveUp(ctx, err)
			}
			return nil, errNoManagement
		}
		if c.bindings == nil {
			c.bindings = map[string][]mgmtBinding{}
		}
		c.bindings[b.Queue] = list
	}
	for _, mb := range list {
		if mb.Source == b.Exchange && mb.DestinationType == "queue" && mb.RoutingKey == b.RoutingKey && len(argSettings(args, mb.Arguments, "")) == 0 {
			return nil, nil
		}
	}
	return &Difference{Kind: "binding", Name: b.Queue, Binding: b, Missing: true}, nil
}

// queueSettings compares q with what the management API reports.
func queueSettings(q Queue, args amqp.Table, b mgmtQueue) []Setting {
	var s []Setting
	if want := queueType(args); b.Type != want {
		s = append(s, Setting{Name: "type", Declared: want, Broker: b.Type})
	}
	s = appendFlag(s, "durable", q.Durable, b.Durable)
	s = appendFlag(s, "auto_delete", q.AutoDelete, b.AutoDelete)
	s = appendFlag(s, "exclusive", q.Exclusive, b.Exclusive)
	return append(s, argSettings(args, b.Arguments, "x-queue-type")...)
}

func exchangeSettings(x Exchange, args amqp.Table, b mgmtExchange) []Setting {
	var s []Setting
	if b.Type != x.Kind {
		s = append(s, Setting{Name: "type", Declared: x.Kind, Broker: b.Type})
	}
	s = appendFlag(s, "durable", x.Durable, b.Durable)
	s = appendFlag(s, "auto_delete", x.AutoDelete, b.AutoDelete)
	s = appendFlag(s, "internal", x.Internal, b.Internal)
	return append(s, argSettings(args, b.Arguments, "")...)
}

// queueType is the type a declaration asks for: without x-queue-type,
// RabbitMQ 3.10 makes a classic queue.
func queueType(args amqp.Table) string {
	if s, ok := args["x-queue-type"].(string); ok && s != "" {
		return s
	}
	return "classic"
}

func appendFlag(s []Setting, name string, declared, broker bool) []Setting {
	if declared == broker {
		return s
	}
	return append(s, Setting{Name: name, Declared: strconv.FormatBool(declared), Broker: strconv.FormatBool(broker)})
}

// argSettings names every argument, but skip, that differs between the
// declaration and the broker, sorted by name.
func argSettings(declared amqp.Table, broker map[string]any, skip string) []Setting {
	keys := map[string]bool{}
	for k := range declared {
		keys[k] = true
	}
	for k := range broker {
		keys[k] = true
	}
	var s []Setting
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if k == skip {
			continue
		}
		dv, dok := declared[k]
		bv, bok := broker[k]
		bv = jsonValue(bv)
		if dok == bok && canon(dv) == canon(bv) {
			continue
		}
		set := Setting{Name: k, Arg: true}
		if dok {
			set.Declared = argString(dv)
		}
		if bok {
			set.Broker = argString(bv)
		}
		s = append(s, set)
	}
	return s
}

// canon is a value's kind and text, equal for equal values whatever their
// Go type: the whole number 1000 as int64 or float64, a table as
// map[string]any or amqp.Table.
func canon(v any) string {
	switch x := v.(type) {
	case nil:
		return "nil"
	case int64:
		return "n:" + strconv.FormatInt(x, 10)
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return "n:" + strconv.FormatInt(int64(x), 10)
		}
		return "n:" + strconv.FormatFloat(x, 'g', -1, 64)
	case string:
		return "s:" + strconv.Quote(x)
	case bool:
		return "b:" + strconv.FormatBool(x)
	case amqp.Table:
		return canon(map[string]any(x))
	case map[string]any:
		parts := make([]string, 0, len(x))
		for _, k := range slices.Sorted(maps.Keys(x)) {
			parts = append(parts, strconv.Quote(k)+"="+canon(jsonValue(x[k])))
		}
		return "t:{" + strings.Join(parts, ",") + "}"
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = canon(jsonValue(e))
		}
		return "a:[" + strings.Join(parts, ",") + "]"
	}
	if n, err := argValue(v); err == nil && fmt.Sprintf("%T", n) != fmt.Sprintf("%T", v) {
		return canon(n)
	}
	return fmt.Sprintf("%T:%v", v, v)
}

// argString is an argument value as a person reads it: a string as it is,
// unless it would read as a number, a boolean or nothing, then quoted.
func argString(v any) string {
	switch x := v.(type) {
	case string:
		if _, err := strconv.ParseFloat(x, 64); err == nil || x == "" || x == "true" || x == "false" || strings.ContainsAny(x, ",={} ") {
			return strconv.Quote(x)
		}
		return x
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case amqp.Table:
		return argString(map[string]any(x))
	case map[string]any:
		parts := make([]string, 0, len(x))
		for _, k := range slices.Sorted(maps.Keys(x)) {
			parts = append(parts, k+"="+argString(jsonValue(x[k])))
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return fmt.Sprint(v)
}

// probeTarget is a declaration that a probe moves, refusal by refusal,
// toward what the broker has.
type probeTarget struct {
	kind    string
	typ     string          // an exchange's type
	flags   map[string]bool // durable, auto_delete, exclusive or internal
	args    amqp.Table      // a copy of the declaration's
	declare func(ch *amqp.Channel) error
}

func queueProbe(q Queue, args amqp.Table) *probeTarget {
	p := &probeTarget{kind: "queue", args: maps.Clone(args), flags: map[string]bool{
		"durable": q.Durable, "auto_delete": q.AutoDelete, "exclusive": q.Exclusive,
	}}
	if p.args == nil {
		p.args = amqp.Table{}
	}
	p.declare = func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(q.Name, p.flags["durable"], p.flags["auto_delete"], p.flags["exclusive"], false, p.args)
		return err
	}
	return p
}

func exchangeProbe(x Exchange, args amqp.Table) *probeTarget {
	p := &probeTarget{kind: "exchange", typ: x.Kind, args: maps.Clone(args), flags: map[string]bool{
		"durable": x.Durable, "auto_delete": x.AutoDelete, "internal": x.Internal,
	}}
	if p.args == nil {
		p.args = amqp.Table{}
	}
	p.declare = func(ch *amqp.Channel) error {
		return ch.ExchangeDeclare(x.Name, p.typ, p.flags["durable"], p.flags["auto_delete"], p.flags["internal"], false, p.args)
	}
	return p
}

// probe declares p, which exists, on a channel of its own each time, until
// the broker accepts it; each PRECONDITION_FAILED names one setting, which
// is recorded and set to the broker's value for the next declaration. It
// returns the settings found, and the text of a refusal it could not read
// or that did not move the declaration. The entity exists throughout, so
// the declarations create and change nothing.
func (c *checker) probe(ctx context.Context, kind, name string, p *probeTarget) ([]Setting, string, error) {
	var found []Setting
	seen := map[string]bool{}
	for range 64 {
		err := c.t.passive(ctx, fmt.Sprintf("check %s %q", kind, name), func(ch *amqp.Channel) error { return p.declare(ch) })
		if err == nil {
			return sortSettings(found), "", nil
		}
		var ae *amqp.Error
		if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
			return nil, "", err
		}
		s, ok := p.adjust(ae.Reason)
		if !ok || seen[s.Name] {
			return sortSettings(found), ae.Reason, nil
		}
		seen[s.Name] = true
		found = append(found, s)
	}
	return sortSettings(found), "", fmt.Errorf("check %s %q: the broker kept refusing the declaration", kind, name)
}

// adjust reads a PRECONDITION_FAILED's text, only to learn the setting and
// the broker's value (that it is drift was decided on the reply code), and
// sets the declaration to that value. It reports false when the text
// cannot be read or the value would not change.
func (p *probeTarget) adjust(reason string) (Setting, bool) {
	m := inequivalent.FindStringSubmatch(reason)
	if m == nil {
		return Setting{}, false
	}
	arg, current := m[1], m[3]
	switch {
	case p.kind == "queue" && arg == "x-queue-type":
		v, none, ok := refusedValue(current, "")
		t, isString := v.(string)
		if !ok || (!none && !isString) {
			return Setting{}, false
		}
		s := Setting{Name: "type", Declared: queueType(p.args), Broker: "classic"}
		if none {
			delete(p.args, arg)
		} else {
			p.args[arg], s.Broker = t, t
		}
		return s, s.Broker != s.Declared
	case p.kind == "exchange" && arg == "type":
		v, _, ok := refusedValue(current, "")
		t, isString := v.(string)
		if !ok || !isString || t == p.typ {
			return Setting{}, false
		}
		s := Setting{Name: "type", Declared: p.typ, Broker: t}
		p.typ = t
		return s, true
	}
	if old, isFlag := p.flags[arg]; isFlag {
		v, _, ok := refusedValue(current, false)
		b, isBool := v.(bool)
		if !ok || !isBool || b == old {
			return Setting{}, false
		}
		p.flags[arg] = b
		return Setting{Name: arg, Declared: strconv.FormatBool(old), Broker: strconv.FormatBool(b)}, true
	}
	old, had := p.args[arg]
	v, none, ok := refusedValue(current, old)
	if !ok || (none && !had) || (!none && had && canon(v) == canon(old)) {
		return Setting{}, false
	}
	s := Setting{Name: arg, Arg: true}
	if had {
		s.Declared = argString(old)
	}
	if none {
		delete(p.args, arg)
	} else {
		p.args[arg], s.Broker = v, argString(v)
	}
	return s, true
}

var (
	typedText  = regexp.MustCompile(`^the value '(.*)' of type '([^']*)'$`)
	quotedText = regexp.MustCompile(`^'(.*)'$`)
)

// refusedValue reads a value as RabbitMQ writes it in a refusal: none, the
// value 'X' of type 'T', or 'X', which is read as the type of like.
func refusedValue(text string, like any) (v any, none, ok bool) {
	if text == "none" {
		return nil, true, true
	}
	if m := typedText.FindStringSubmatch(text); m != nil {
		switch m[2] {
		case "long", "signedint", "short", "byte", "unsignedbyte", "unsignedshort", "unsignedint", "timestamp":
			i, err := strconv.ParseInt(m[1], 10, 64)
			return i, false, err == nil
		case "double", "float":
			f, err := strconv.ParseFloat(m[1], 64)
			return f, false, err == nil
		case "bool":
			b, err := strconv.ParseBool(m[1])
			return b, false, err == nil
		case "longstr", "shortstr", "binary":
			return m[1], false, true
		}
		return nil, false, false
	}
	m := quotedText.FindStringSubmatch(text)
	if m == nil {
		return nil, false, false
	}
	switch like.(type) {
	case int64:
		i, err := strconv.ParseInt(m[1], 10, 64)
		return i, false, err == nil
	case float64:
		f, err := strconv.ParseFloat(m[1], 64)
		return f, false, err == nil
	case bool:
		b, err := strconv.ParseBool(m[1])
		return b, false, err == nil
	}
	return m[1], false, true
}

var settingOrder = map[string]int{"type": 0, "durable": 1, "auto_delete": 2, "exclusive": 3, "internal": 4}

// sortSettings puts the type first, then the flags, then the arguments by
// name.
func sortSettings(s []Setting) []Setting {
	rank := func(x Setting) int {
		if x.Arg {
			return len(settingOrder)
		}
		return settingOrder[x.Name]
	}
	slices.SortStableFunc(s, func(a, b Setting) int {
		if d := rank(a) - rank(b); d != 0 {
			return d
		}
		return strings.Compare(a.Name, b.Name)
	})
	return s
}
