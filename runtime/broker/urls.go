package broker

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
)

// SplitURLs returns the broker URLs in s, which holds one URL or several
// separated by commas (the nodes of a cluster, say), in order, without
// blanks. A comma separates two URLs only where the next one starts, with
// amqp:// or amqps://: a comma inside a URL, in a password say, stays in
// it.
func SplitURLs(s string) []string {
	var urls []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] != ',' {
			continue
		}
		rest := strings.TrimLeft(s[i+1:], " \t")
		if lower := strings.ToLower(rest); strings.HasPrefix(lower, "amqp://") || strings.HasPrefix(lower, "amqps://") || rest == "" {
			urls = appendURL(urls, s[start:i])
			start = i + 1
		}
	}
	return appendURL(urls, s[start:])
}

func appendURL(urls []string, u string) []string {
	if u = strings.TrimSpace(u); u != "" {
		urls = append(urls, u)
	}
	return urls
}

// RedactURLs returns s, one broker URL or several separated by commas, with
// every password replaced by xxxxx.
func RedactURLs(s string) string {
	urls := SplitURLs(s)
	for i, u := range urls {
		urls[i] = redactURL(u)
	}
	return strings.Join(urls, ",")
}

// endpoint is one broker URL a Conn may connect to: a node of a cluster, or
// the only broker. Everything in it is worked out at Open, without I/O.
type endpoint struct {
	url      string // carries the password: never log, never format
	redacted string
	node     string      // host:port, for logs and Health
	pass     []string    // the password as written and decoded, for scrub
	tls      *tls.Config // nil: amqp://; see TLSConfig
	dialURL  string      // url, or for amqps its amqp:// twin: the handshake is dial's own (tls.go)
	mgmt     *management // nil: ManagementOff
}

// newEndpoint checks rawURL and works out how to dial it and where its
// management API answers. name is the connection's, for errors.
func newEndpoint(rawURL, name string, opts ConnOptions) (*endpoint, error) {
	redacted := redactURL(rawURL)
	// A '/', '?' or '#' in the password ends the authority early: net/url
	// then fails with an error quoting part of the password, or reads that
	// part as the port or the path, and the '@' lands after the host. Its
	// error text is never used.
	u, err := url.Parse(rawURL)
	if err != nil || atAfterHost(rawURL) {
		return nil, fmt.Errorf("connection %q: invalid AMQP URL %s; write it as amqp://user:password@host:port/vhost and percent-encode '/', '?', '#' and '@' in the user name, password and vhost (%%2F, %%3F, %%23, %%40)", name, redacted)
	}
	ep := &endpoint{url: rawURL, redacted: redacted, dialURL: rawURL}
	if p, ok := u.User.Password(); ok && p != "" {
		ep.pass = append(ep.pass, p)
		if _, raw, _ := strings.Cut(u.User.String(), ":"); raw != p {
			ep.pass = append(ep.pass, raw)
		}
	}
	uri, err := amqp.ParseURI(rawURL)
	if err != nil {
		return nil, fmt.Errorf("connection %q: invalid AMQP URL %s: %w", name, redacted, scrubWith(ep.pass, err))
	}
	ep.node = net.JoinHostPort(uri.Host, fmt.Sprint(uri.Port))
	if ep.tls, err = TLSConfig(rawURL); err != nil {
		return nil, fmt.Errorf("connection %q to %s: %w", name, redacted, scrubWith(ep.pass, err))
	}
	if ep.tls != nil {
		ep.dialURL = plainTwin(u)
	}
	if ep.mgmt, err = newManagement(rawURL, opts.Management, opts.OpTimeout); err != nil {
		return nil, fmt.Errorf("connection %q: %w", name, scrubWith(ep.pass, err))
	}
	ep.mgmt.verifyAs(ep.tls)
	return ep, nil
}

// ep returns the endpoint of the current connection, or of the last one
// while reconnecting.
func (c *Conn) ep() *endpoint { return c.eps[c.at.Load()] }

// Node returns the host:port of the broker node the Conn is connected to,
// or was last connected to while it reconnects; "" for a Conn that was
// given no URL (one built by hand, as tests do).
func (c *Conn) Node() string {
	if len(c.eps) == 0 {
		return ""
	}
	return c.ep().node
}

// Nodes returns how many broker URLs the Conn was given.
func (c *Conn) Nodes() int { return len(c.eps) }

// mgmtAPI returns the management API of the node connected to: the
// topology check reads the node it declares on (an explicit
// ConnOptions.Management is every node's).
func (c *Conn) mgmtAPI() *management { return c.ep().mgmt }
