package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/acemq/acemq-flow/runtime"
	"github.com/acemq/acemq-flow/runtime/decide"
	"github.com/acemq/acemq-flow/runtime/scheduler"
)

// WireMessage is a message as JSON, for the admin API: `send` without flow
// files asks the running runtime to build the first message of a run.
type WireMessage struct {
	Exchange      string         `json:"exchange"`
	RoutingKey    string         `json:"routing_key"`
	MessageID     string         `json:"message_id"`
	CorrelationID string         `json:"correlation_id"`
	Type          string         `json:"type,omitempty"`
	ContentType   string         `json:"content_type,omitempty"`
	Timestamp     time.Time      `json:"timestamp"`
	Headers       map[string]any `json:"headers"`
	Body          []byte         `json:"body"`
}

// WireMessageOf encodes a message for the admin API.
func WireMessageOf(m decide.Message) WireMessage {
	return WireMessage{Exchange: m.Exchange, RoutingKey: m.RoutingKey, MessageID: m.MessageID, CorrelationID: m.CorrelationID,
		Type: m.Type, ContentType: m.ContentType, Timestamp: m.Timestamp, Headers: m.Headers, Body: m.Body}
}

// Message decodes it; whole numbers in headers come back as int64.
func (w WireMessage) Message() decide.Message {
	h := decide.Table{}
	for k, v := range w.Headers {
		if f, ok := v.(float64); ok && f == float64(int64(f)) {
			v = int64(f)
		}
		h[k] = v
	}
	return decide.Message{Exchange: w.Exchange, RoutingKey: w.RoutingKey,
		MessageID: w.MessageID, CorrelationID: w.CorrelationID, Type: w.Type, ContentType: w.ContentType,
		DeliveryMode: decide.Persistent, Timestamp: w.Timestamp, Headers: h, Body: w.Body}
}

// Client calls a running runtime's admin API. Each call ends with its
// context (Ctrl-C), or after two minutes.
type Client struct {
	base  string
	token string
	http  *http.Client
}

// NewClient returns a client of the admin API at addr (host:port, or a
// URL), sending token as a bearer token when it is not empty.
func NewClient(addr, token string) *Client {
	base := addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	return &Client{base: strings.TrimRight(base, "/"), token: token, http: &http.Client{Timeout: 2 * time.Minute}}
}

// Consumers lists the runtime's consumer groups.
func (a *Client) Consumers(ctx context.Context) ([]runtime.ConsumerStatus, error) {
	var out struct {
		Consumers []runtime.ConsumerStatus `json:"consumers"`
	}
	if err := a.do(ctx, "GET", "/v1/consumers", &out); err != nil {
		return nil, err
	}
	return out.Consumers, nil
}

// Change asks the runtime to start or stop consumer id (verb "start" or
// "stop").
func (a *Client) Change(ctx context.Context, id, verb string) error {
	return a.do(ctx, "POST", "/v1/consumers/"+url.PathEscape(id)+"/"+verb, nil)
}

// Set sets param of consumer id to n, with verb "scale" (param "size") or
// "prefetch" (param "prefetch").
func (a *Client) Set(ctx context.Context, id, verb, param string, n int) error {
	return a.do(ctx, "POST", fmt.Sprintf("/v1/consumers/%s/%s?%s=%d", url.PathEscape(id), verb, param, n), nil)
}

// FirstMessage asks the runtime to build the first message of a run to t
// from the flows it runs.
func (a *Client) FirstMessage(ctx context.Context, t decide.Target, payload []byte) (decide.Message, error) {
	if len(payload) == 0 {
		payload = []byte("null")
	}
	var wm WireMessage
	err := a.post(ctx, "/v1/messages/first", map[string]any{"target": t, "payload": json.RawMessage(payload)}, &wm)
	return wm.Message(), err
}

// Schedules asks the runtime for its schedules with their last and next
// tick and the ticks missed (GET /v1/schedules).
func (a *Client) Schedules(ctx context.Context) (scheduler.View, error) {
	var v scheduler.View
	err := a.do(ctx, "GET", "/v1/schedules", &v)
	return v, err
}

func (a *Client) do(ctx context.Context, method, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, nil)
	if err != nil {
		return err
	}
	return a.send(req, out)
}

func (a *Client) send(req *http.Request, out any) error {
	method, path := req.Method, req.URL.Path
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return fmt.Errorf("the runtime's admin API at %s does not answer (%v); is `acemq-flow run` running with --admin %s?", a.base, err, strings.TrimPrefix(a.base, "http://"))
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode == http.StatusUnauthorized {
		if a.token == "" {
			return fmt.Errorf("the runtime's admin API at %s needs a token for %s %s and none was given; set --admin-token or ACEMQ_ADMIN_TOKEN to the token the runtime was started with", a.base, method, path)
		}
		return fmt.Errorf("the runtime's admin API at %s rejected the token given by --admin-token or ACEMQ_ADMIN_TOKEN for %s %s; use the token the runtime was started with", a.base, method, path)
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return fmt.Errorf("%s", e.Error)
		}
		return fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	if out != nil {
		return json.Unmarshal(body, out)
	}
	return nil
}

// post sends a JSON body and decodes the JSON answer.
func (a *Client) post(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, "POST", a.base+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	return a.send(req, out)
}
