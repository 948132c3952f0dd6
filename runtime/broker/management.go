package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ManagementOff as ConnOptions.Management keeps a Conn's Topology away from
// the management API: drift is then read from the broker's refusals.
const ManagementOff = "off"

// management reads queues, exchanges and bindings through RabbitMQ's
// management HTTP API, which reports a queue's type and every argument,
// where a refused declaration names one argument only. Its base URL carries
// no user information: the credentials go in each request's header, so an
// error from net/http (which quotes the URL) never carries the password.
type management struct {
	base     string // scheme://host:port[/prefix], no trailing '/'
	shown    string // base with the user, for logs and errors
	user     string
	pass     string
	vhost    string
	explicit bool // set in ConnOptions rather than derived from the AMQP URL
	timeout  time.Duration
	client   *http.Client
}

// newManagement works out where the management API of the broker at
// amqpURL answers: opt when set (its user and password, or else the AMQP
// URL's), or else http://host:15672 (https://host:15671 for amqps) with the
// AMQP URL's user and password. It does no I/O. ManagementOff gives nil.
func newManagement(amqpURL, opt string, timeout time.Duration) (*management, error) {
	if opt == ManagementOff {
		return nil, nil
	}
	uri, err := amqp.ParseURI(amqpURL)
	if err != nil {
		return nil, err
	}
	m := &management{user: uri.Username, pass: uri.Password, vhost: uri.Vhost, timeout: timeout, client: &http.Client{}}
	var u *url.URL
	if opt == "" {
		scheme, port := "http", "15672"
		if uri.Scheme == "amqps" {
			scheme, port = "https", "15671"
		}
		u = &url.URL{Scheme: scheme, Host: hostPort(uri.Host, port)}
	} else {
		m.explicit = true
		u, err = url.Parse(opt)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("invalid management URL %s; write it as http://host:15672, or %q to read drift from the broker's refusals", redactURL(opt), ManagementOff)
		}
		if u.User != nil {
			m.user = u.User.Username()
			m.pass, _ = u.User.Password()
		}
	}
	u.User = nil
	u.RawQuery, u.Fragment = "", ""
	m.base = strings.TrimSuffix(u.String(), "/")
	shown := *u
	shown.User = url.UserPassword(m.user, m.pass)
	m.shown = strings.TrimSuffix(shown.Redacted(), "/")
	return m, nil
}

func hostPort(host, port string) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + port
	}
	return host + ":" + port
}

// errManagementNotFound is the API's 404: no such queue or exchange.
var errManagementNotFound = errors.New("not found through the management API")

// get fetches /api/<segments> (each escaped on its own, so a vhost "/" is
// %2F) with query into v. A 404 gives errManagementNotFound; any other
// failure means the API cannot be used.
func (m *management) get(ctx context.Context, v any, query string, segments ...string) error {
	var p strings.Builder
	p.WriteString(m.base)
	p.WriteString("/api")
	for _, s := range segments {
		p.WriteByte('/')
		p.WriteString(url.PathEscape(s))
	}
	if query != "" {
		p.WriteByte('?')
		p.WriteString(query)
	}
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.String(), nil)
	if err != nil {
		return err
	}
	req.SetBasicAuth(m.user, m.pass)
	resp, err := m.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return err
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return errManagementNotFound
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("%s answered %s", m.shown, resp.Status)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %w", m.shown, err)
	}
	return nil
}

// mgmtQueue is what the API reports about a queue, the fields compared.
type mgmtQueue struct {
	Type       string         `json:"type"`
	Durable    bool           `json:"durable"`
	AutoDelete bool           `json:"auto_delete"`
	Exclusive  bool           `json:"exclusive"`
	Arguments  map[string]any `json:"arguments"`
}

type mgmtExchange struct {
	Type       string         `json:"type"`
	Durable    bool           `json:"durable"`
	AutoDelete bool           `json:"auto_delete"`
	Internal   bool           `json:"internal"`
	Arguments  map[string]any `json:"arguments"`
}

type mgmtBinding struct {
	Source          string         `json:"source"`
	Destination     string         `json:"destination"`
	DestinationType string         `json:"destination_type"`
	RoutingKey      string         `json:"routing_key"`
	Arguments       map[string]any `json:"arguments"`
}

func (m *management) queue(ctx context.Context, name string) (mgmtQueue, error) {
	var q mgmtQueue
	err := m.get(ctx, &q, "columns=type,durable,auto_delete,exclusive,arguments", "queues", m.vhost, name)
	return q, err
}

func (m *management) exchange(ctx context.Context, name string) (mgmtExchange, error) {
	var x mgmtExchange
	err := m.get(ctx, &x, "", "exchanges", m.vhost, name)
	return x, err
}

func (m *management) bindings(ctx context.Context, queue string) ([]mgmtBinding, error) {
	var bs []mgmtBinding
	err := m.get(ctx, &bs, "", "queues", m.vhost, queue, "bindings")
	return bs, err
}

// jsonValue turns a value the API decoded (numbers as json.Number) into
// the types Args produces: int64 for whole numbers, float64 otherwise.
func jsonValue(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return i
		}
		if f, err := x.Float64(); err == nil {
			return floatOrInt(f)
		}
		return string(x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = jsonValue(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonValue(e)
		}
		return out
	}
	return v
}

func floatOrInt(f float64) any {
	v, _ := floatArg(f)
	return v
}
