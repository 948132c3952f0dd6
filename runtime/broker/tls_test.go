package broker

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq-flow/test/testenv"
)

func TestTLSConfigFromTheURL(t *testing.T) {
	p := testenv.NewPKI(t)
	garbage := filepath.Join(p.Dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	q := func(kv ...string) string {
		v := url.Values{}
		for i := 0; i < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return "?" + v.Encode()
	}
	cases := []struct {
		name, url  string
		wantNil    bool
		serverName string
		roots      bool
		client     bool
		wantErr    string
	}{
		{name: "amqp:// has none", url: "amqp://guest:guest@localhost:5672/", wantNil: true},
		{name: "amqp:// with TLS files would not use them", url: "amqp://u:p@broker:5672/" + q("cacertfile", p.CAFile), wantErr: "is amqp://, which does not use TLS; write amqps://"},
		{name: "amqps:// verifies the host by default", url: "amqps://guest:guest@broker.internal:5671/", serverName: "broker.internal"},
		{name: "a CA file", url: "amqps://u:p@broker:5671/" + q("cacertfile", p.CAFile), serverName: "broker", roots: true},
		{name: "server_name_indication names the certificate's name", url: "amqps://u:p@10.0.0.5:5671/" + q("cacertfile", p.CAFile, "server_name_indication", "broker.internal"), serverName: "broker.internal", roots: true},
		{name: "a client certificate", url: "amqps://u:p@broker:5671/" + q("cacertfile", p.CAFile, "certfile", p.ClientCertFile, "keyfile", p.ClientKeyFile), serverName: "broker", roots: true, client: true},
		{name: "a certfile without its keyfile", url: "amqps://u:p@broker:5671/" + q("certfile", p.ClientCertFile), wantErr: "one of certfile and keyfile without the other"},
		{name: "a keyfile without its certfile", url: "amqps://u:p@broker:5671/" + q("keyfile", p.ClientKeyFile), wantErr: "give both for a client certificate, or neither"},
		{name: "a CA file with no certificate", url: "amqps://u:p@broker:5671/" + q("cacertfile", garbage), wantErr: "holds no PEM certificate"},
		{name: "a CA file that is missing", url: "amqps://u:p@broker:5671/" + q("cacertfile", filepath.Join(p.Dir, "nope.pem")), wantErr: "read the CA certificates of the amqps URL (cacertfile)"},
		{name: "a key that is not the certificate's", url: "amqps://u:p@broker:5671/" + q("certfile", p.ClientCertFile, "keyfile", p.OtherClientKey), wantErr: "load the client certificate of the amqps URL"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := TLSConfig(tc.url)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("TLSConfig: %v; want an error saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("TLSConfig: %v", err)
			}
			if tc.wantNil {
				if cfg != nil {
					t.Fatalf("TLSConfig = %+v, want nil", cfg)
				}
				return
			}
			if cfg.InsecureSkipVerify {
				t.Error("InsecureSkipVerify is set")
			}
			if cfg.MinVersion != tls.VersionTLS12 {
				t.Errorf("MinVersion %x, want TLS 1.2", cfg.MinVersion)
			}
			if cfg.ServerName != tc.serverName {
				t.Errorf("ServerName %q, want %q", cfg.ServerName, tc.serverName)
			}
			if (cfg.RootCAs != nil) != tc.roots {
				t.Errorf("RootCAs set: %v, want %v", cfg.RootCAs != nil, tc.roots)
			}
			if (len(cfg.Certificates) == 1) != tc.client {
				t.Errorf("%d client certificates, want one: %v", len(cfg.Certificates), tc.client)
			}
		})
	}
}

// TestAMQPSChecksTheBrokerAndShowsItsCertificate connects through a TLS
// listener in front of the test broker with a CA the test made: with the
// CA, the client certificate and the right name it connects and works;
// without the CA, by a name the certificate does not hold, or without a
// client certificate, the first connection fails at once, saying what to
// give in the URL.
func TestAMQPSChecksTheBrokerAndShowsItsCertificate(t *testing.T) {
	u, err := url.Parse(testenv.VHost(t))
	if err != nil {
		t.Fatal(err)
	}
	p := testenv.NewPKI(t)
	px := testenv.StartTLSProxy(t, p, u.Host, nil)
	_, port, _ := net.SplitHostPort(px.Addr)
	amqps := func(host string, kv ...string) string {
		v := url.Values{}
		for i := 0; i < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return "amqps://" + u.User.String() + "@" + net.JoinHostPort(host, port) + u.EscapedPath() + "?" + v.Encode()
	}
	full := []string{"cacertfile", p.CAFile, "certfile", p.ClientCertFile, "keyfile", p.ClientKeyFile}

	t.Run("the CA, a client certificate and the certificate's name connect", func(t *testing.T) {
		for _, rawURL := range []string{
			amqps("localhost", full...),
			amqps("127.0.0.1", append(full, "server_name_indication", "localhost")...),
		} {
			c, err := Open(t.Context(), rawURL, ConnOptions{Name: "tls-test", Management: ManagementOff})
			if err != nil {
				t.Fatalf("Open %s: %v", redactURL(rawURL), err)
			}
			ch, err := c.Channel(t.Context())
			if err != nil {
				t.Fatalf("channel over TLS: %v", err)
			}
			q, err := ch.QueueDeclare("", false, true, true, false, nil)
			if err != nil {
				t.Fatalf("declare over TLS: %v", err)
			}
			if !strings.HasPrefix(q.Name, "amq.gen-") {
				t.Errorf("declared %q", q.Name)
			}
			ch.Close()
			c.Close()
		}
		if got := px.Clients(); len(got) < 2 || got[0] != "acemq-flow-client" {
			t.Errorf("the TLS listener saw client certificates %q, want acemq-flow-client on each connection", got)
		}
	})

	refused := []struct {
		name, url, want string
	}{
		{"without the CA", amqps("localhost", "certfile", p.ClientCertFile, "keyfile", p.ClientKeyFile), "not signed by a CA this connection trusts"},
		{"with another CA", amqps("localhost", "cacertfile", p.OtherCAFile, "certfile", p.ClientCertFile, "keyfile", p.ClientKeyFile), "give the CA's certificate as cacertfile=PATH"},
		{"by a name the certificate does not hold", amqps("127.0.0.1", full...), "server_name_indication=NAME"},
		{"naming another server", amqps("localhost", append(full, "server_name_indication", "rabbit.example")...), "not for the name connected to"},
		{"without a client certificate", amqps("localhost", "cacertfile", p.CAFile), "certfile=PATH&keyfile=PATH"},
		{"with a client certificate of another CA", amqps("localhost", "cacertfile", p.CAFile, "certfile", p.OtherClientCert, "keyfile", p.OtherClientKey), "the broker ended the TLS handshake"},
	}
	for _, tc := range refused {
		t.Run("refused "+tc.name, func(t *testing.T) {
			// A first connection that TLS refuses fails at once, not when
			// the context ends.
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			c, err := Open(ctx, tc.url, ConnOptions{Name: "tls-test", Management: ManagementOff})
			if err == nil {
				c.Close()
				t.Fatalf("Open %s connected", redactURL(tc.url))
			}
			if ctx.Err() != nil {
				t.Fatalf("Open kept trying until the context ended: %v", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Open: %v\nwant it to say %q", err, tc.want)
			}
			if pw, _ := u.User.Password(); pw != "" && strings.Contains(err.Error(), ":"+pw+"@") {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}

	t.Run("plain amqp:// to the TLS port", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		plain := "amqp://" + u.User.String() + "@" + px.Addr + u.EscapedPath()
		if c, err := Open(ctx, plain, ConnOptions{Name: "tls-test", Management: ManagementOff, DialTimeout: time.Second}); err == nil {
			c.Close()
			t.Fatal("amqp:// to a TLS listener connected")
		}
	})
}

// TestAMQPSManagementIsVerifiedAsTheBroker checks that the management API
// of an amqps broker is called with the same CAs and client certificate.
func TestAMQPSManagementIsVerifiedAsTheBroker(t *testing.T) {
	p := testenv.NewPKI(t)
	raw := "amqps://guest:guest@localhost:5671/?" + url.Values{"cacertfile": {p.CAFile}, "certfile": {p.ClientCertFile}, "keyfile": {p.ClientKeyFile}}.Encode()
	cfg, err := TLSConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	m, err := newManagement(raw, "", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	m.verifyAs(cfg)
	if !strings.HasPrefix(m.base, "https://localhost:15671") {
		t.Errorf("management base %s, want https://localhost:15671", m.base)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{p.Server}, ClientCAs: p.Pool, ClientAuth: tls.RequireAndVerifyClientCert})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		tc := c.(*tls.Conn)
		if err := tc.Handshake(); err != nil {
			got <- "handshake: " + err.Error()
			return
		}
		got <- tc.ConnectionState().PeerCertificates[0].Subject.CommonName
		io.WriteString(tc, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	m.base = "https://localhost:" + port
	var v map[string]any
	err = m.get(t.Context(), &v, "", "queues", "/", "nope")
	if cn := <-got; cn != "acemq-flow-client" {
		t.Fatalf("the management API saw %q, want the client certificate acemq-flow-client", cn)
	}
	if err == nil {
		t.Error("a 404 read as a queue")
	}
}
