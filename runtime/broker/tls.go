package broker

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TLSConfig returns the TLS configuration an amqps:// URL asks for, or nil
// for amqp:// (an amqp:// URL with TLS settings is an error). It reads the query parameters of RabbitMQ's URI spec, as
// amqp091-go does, but refuses what amqp091-go would let pass silently:
//
//   - cacertfile: the PEM file of the CAs the broker's certificate must be
//     signed by (default: the system's); a file with no certificate in it
//     is an error, not an empty trust store;
//   - certfile and keyfile: the client certificate and its key, for a
//     broker that asks for one (ssl_options.fail_if_no_peer_cert); one
//     without the other is an error, not a connection without it;
//   - server_name_indication: the name the broker's certificate must hold
//     (default: the URL's host).
//
// The broker's certificate is always verified, its name included; TLS 1.2
// is the oldest version accepted. The files are read once, here: a Conn
// reads them at Open, and a certificate renewed on disk takes effect at the
// next Open. The management API of an amqps broker is verified with the
// same configuration.
func TLSConfig(rawURL string) (*tls.Config, error) {
	uri, err := amqp.ParseURI(rawURL)
	if err != nil {
		return nil, err
	}
	if uri.Scheme != "amqps" {
		// A URL written amqp:// with the TLS files would connect without
		// TLS, the files unread.
		if uri.CACertFile != "" || uri.CertFile != "" || uri.KeyFile != "" || uri.ServerName != "" {
			return nil, errors.New("the URL names TLS settings (cacertfile, certfile, keyfile or server_name_indication) but is amqp://, which does not use TLS; write amqps:// (the broker's TLS port, 5671 by default)")
		}
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: uri.Host}
	if uri.ServerName != "" {
		cfg.ServerName = uri.ServerName
	}
	if uri.CACertFile != "" {
		pem, err := os.ReadFile(uri.CACertFile)
		if err != nil {
			return nil, fmt.Errorf("read the CA certificates of the amqps URL (cacertfile): %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("the amqps URL's cacertfile %s holds no PEM certificate; give the file of the CA that signed the broker's certificate", uri.CACertFile)
		}
		cfg.RootCAs = pool
	}
	switch {
	case uri.CertFile != "" && uri.KeyFile != "":
		cert, err := tls.LoadX509KeyPair(uri.CertFile, uri.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load the client certificate of the amqps URL (certfile %s, keyfile %s): %w", uri.CertFile, uri.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	case uri.CertFile != "" || uri.KeyFile != "":
		return nil, errors.New("the amqps URL gives one of certfile and keyfile without the other; give both for a client certificate, or neither")
	}
	return cfg, nil
}

// tlsRefusal says what a failed TLS handshake means and how to put it
// right, or returns "" when err is no TLS failure. Neither side's
// certificate changes by waiting: a first connection fails at once.
func tlsRefusal(err error) string {
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		remote    *net.OpError
		record    tls.RecordHeaderError
		frame     *amqp.Error
	)
	switch {
	case errors.As(err, &unknownCA):
		return fmt.Sprintf("the broker's certificate is not signed by a CA this connection trusts (%v); give the CA's certificate as cacertfile=PATH in the amqps URL", unknownCA)
	case errors.As(err, &hostname):
		return fmt.Sprintf("the broker's certificate is not for the name connected to (%v); connect by a name the certificate holds, or name it as server_name_indication=NAME in the amqps URL", hostname)
	case errors.As(err, &invalid):
		return fmt.Sprintf("the broker's certificate is not valid (%v); renew it, or check the machine's clock", invalid)
	case errors.As(err, &remote) && remote.Op == "remote error":
		// crypto/tls reports the broker's alert this way, its code
		// unexported: certificate_required and bad_certificate are the
		// usual ones, a client certificate missing or not trusted.
		return fmt.Sprintf("the broker ended the TLS handshake (%v); if it asks for a client certificate, give one signed by a CA it trusts as certfile=PATH&keyfile=PATH in the amqps URL, or else check the TLS versions its ssl_options allow", remote)
	case errors.As(err, &frame) && strings.HasPrefix(frame.Reason, "remote error: tls: "):
		// With TLS 1.3 the broker's alert can come after the client's
		// side of the handshake has ended, on amqp091-go's first read,
		// which reports it as a frame error holding only its text.
		return fmt.Sprintf("the broker ended the TLS handshake (%s); if it asks for a client certificate, give one signed by a CA it trusts as certfile=PATH&keyfile=PATH in the amqps URL, or else check the TLS versions its ssl_options allow", frame.Reason)
	case errors.As(err, &record):
		return fmt.Sprintf("the broker does not speak TLS on that port (%v); use amqp:// there, or the broker's TLS port (5671 by default)", record)
	}
	return ""
}

// verifyAs makes an amqps broker's management API verified as the broker
// is, with the same CAs and client certificate; the server name is the
// management URL's own host. A nil m or cfg changes nothing.
func (m *management) verifyAs(cfg *tls.Config) {
	if m == nil || cfg == nil {
		return
	}
	mt := cfg.Clone()
	mt.ServerName = ""
	m.client.Transport = &http.Transport{TLSClientConfig: mt, Proxy: http.ProxyFromEnvironment}
}

// The TLS handshake of an amqps connection is the Conn's own rather than
// amqp091-go's: amqp091-go turns the broker's refusal of the client
// certificate, which TLS 1.3 delivers on the first read after the
// handshake, into an AMQP frame error that keeps only its text. dial hands
// amqp091-go the amqp:// twin of the URL and a connection already TLS.

// plainTwin returns the amqps URL u as amqp:// with its port written out
// (5671 when it had none), everything else as it was.
func plainTwin(u *url.URL) string {
	twin := *u
	twin.Scheme = "amqp"
	if twin.Port() == "" {
		twin.Host = net.JoinHostPort(twin.Hostname(), "5671")
	}
	return twin.String()
}

// handshake runs the TLS handshake of cfg on nc, within ctx. It closes nc
// when the handshake fails.
func handshake(ctx context.Context, nc net.Conn, cfg *tls.Config) (*tlsConn, error) {
	tc := tls.Client(nc, cfg.Clone())
	if err := tc.HandshakeContext(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	return &tlsConn{Conn: tc}, nil
}

// tlsConn is a TLS connection that keeps the first error a read returned.
type tlsConn struct {
	*tls.Conn
	mu      sync.Mutex
	readErr error
}

func (t *tlsConn) Read(p []byte) (int, error) {
	n, err := t.Conn.Read(p)
	if err != nil {
		t.mu.Lock()
		if t.readErr == nil {
			t.readErr = err
		}
		t.mu.Unlock()
	}
	return n, err
}

// explain returns the broker's TLS alert that ended the AMQP handshake
// when there was one, and err otherwise. A nil t returns err.
func (t *tlsConn) explain(err error) error {
	if t == nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var remote *net.OpError
	if errors.As(t.readErr, &remote) && remote.Op == "remote error" {
		return t.readErr
	}
	return err
}
