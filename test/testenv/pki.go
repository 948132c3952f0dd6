package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// PKI is a CA a test makes, with a server certificate for "localhost"
// (not for 127.0.0.1, so that connecting by the IP tests the name check)
// and a client certificate it signed, and a second CA with a client
// certificate of its own. Every file is PEM, in a t.TempDir.
type PKI struct {
	Dir    string
	CAFile string
	Pool   *x509.CertPool // the CA

	Server                    tls.Certificate
	ServerCertFile, ServerKey string

	ClientCertFile, ClientKeyFile string // CN acemq-flow-client

	OtherCAFile                     string // a CA that signed nothing of the above
	OtherClientCert, OtherClientKey string // a client certificate of the other CA
}

// NewPKI makes a PKI valid from an hour ago for a day.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	dir := t.TempDir()
	p := &PKI{Dir: dir, Pool: x509.NewCertPool()}
	ca, caKey := makeCA(t, "acemq-flow test CA")
	p.CAFile = writePEM(t, dir, "ca.pem", "CERTIFICATE", ca.Raw)
	p.Pool.AddCert(ca)

	srv, srvKey := makeLeaf(t, ca, caKey, "localhost", false)
	p.Server = tls.Certificate{Certificate: [][]byte{srv.Raw}, PrivateKey: srvKey}
	p.ServerCertFile = writePEM(t, dir, "server.pem", "CERTIFICATE", srv.Raw)
	p.ServerKey = writeKey(t, dir, "server-key.pem", srvKey)

	cli, cliKey := makeLeaf(t, ca, caKey, "acemq-flow-client", true)
	p.ClientCertFile = writePEM(t, dir, "client.pem", "CERTIFICATE", cli.Raw)
	p.ClientKeyFile = writeKey(t, dir, "client-key.pem", cliKey)

	other, otherKey := makeCA(t, "another CA")
	p.OtherCAFile = writePEM(t, dir, "other-ca.pem", "CERTIFICATE", other.Raw)
	wrong, wrongKey := makeLeaf(t, other, otherKey, "acemq-flow-client", true)
	p.OtherClientCert = writePEM(t, dir, "other-client.pem", "CERTIFICATE", wrong.Raw)
	p.OtherClientKey = writeKey(t, dir, "other-client-key.pem", wrongKey)
	return p
}

var (
	serialMu sync.Mutex
	serial   = big.NewInt(time.Now().UnixNano())
)

func nextSerial() *big.Int {
	serialMu.Lock()
	defer serialMu.Unlock()
	serial.Add(serial, big.NewInt(1))
	return new(big.Int).Set(serial)
}

func makeCA(t testing.TB, cn string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func makeLeaf(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, name string, client bool) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames = []string{name}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func writePEM(t testing.TB, dir, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func writeKey(t testing.TB, dir, name string, key *ecdsa.PrivateKey) string {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, dir, name, "PRIVATE KEY", der)
}

// TLSProxy is a TLS listener on 127.0.0.1 in front of a plain service: it
// terminates TLS with the PKI's server certificate, requires and verifies
// a client certificate of the PKI's CA, and forwards the bytes to the
// service. It records the client certificates it accepted.
type TLSProxy struct {
	Addr string // 127.0.0.1:port

	mu      sync.Mutex
	clients []string
	conns   []net.Conn
}

// StartTLSProxy listens until the test ends. before, when set, runs on
// each plain connection ahead of the TLS handshake (PostgreSQL's
// SSLRequest); an error from it closes that connection.
func StartTLSProxy(t testing.TB, p *PKI, upstream string, before func(net.Conn) error) *TLSProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{p.Server},
		ClientCAs:    p.Pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	}
	px := &TLSProxy{Addr: ln.Addr().String()}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); px.closeAll(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { px.serve(c, cfg, upstream, before) })
		}
	})
	return px
}

func (px *TLSProxy) serve(c net.Conn, cfg *tls.Config, upstream string, before func(net.Conn) error) {
	defer c.Close()
	px.track(c)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if before != nil {
		if err := before(c); err != nil {
			return
		}
	}
	tc := tls.Server(c, cfg)
	if err := tc.Handshake(); err != nil {
		return
	}
	c.SetDeadline(time.Time{})
	px.mu.Lock()
	for _, cert := range tc.ConnectionState().PeerCertificates {
		px.clients = append(px.clients, cert.Subject.CommonName)
	}
	px.mu.Unlock()
	up, err := net.Dial("tcp", upstream)
	if err != nil {
		return
	}
	defer up.Close()
	px.track(up)
	var copies sync.WaitGroup
	copies.Go(func() { io.Copy(up, tc); up.Close() })
	copies.Go(func() { io.Copy(tc, up); tc.Close() })
	copies.Wait()
}

// track keeps c to be closed when the test ends, so that a client still
// connected does not keep the proxy's goroutines waiting.
func (px *TLSProxy) track(c net.Conn) {
	px.mu.Lock()
	defer px.mu.Unlock()
	px.conns = append(px.conns, c)
}

func (px *TLSProxy) closeAll() {
	px.mu.Lock()
	defer px.mu.Unlock()
	for _, c := range px.conns {
		c.Close()
	}
}

// Clients returns the common names of the client certificates accepted so
// far, one per connection.
func (px *TLSProxy) Clients() []string {
	px.mu.Lock()
	defer px.mu.Unlock()
	return append([]string(nil), px.clients...)
}
