package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nhdkit/nhd/internal/testenv"
	"github.com/nhdkit/nhd/nbd"
)

// tlsTestCerts writes a CA, a server certificate for localhost and a
// client certificate, all PEM, and returns their paths and the CA pool.
func tlsTestCerts(t *testing.T) (dir string, pool *x509.CertPool, client tls.Certificate) {
	t.Helper()
	dir = t.TempDir()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey := newKey()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "clients CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	pool = x509.NewCertPool()
	pool.AddCert(ca)
	write := func(name, typ string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("ca.pem", "CERTIFICATE", caDER)
	issue := func(name string, serial int64, usage x509.ExtKeyUsage) tls.Certificate {
		key := newKey()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kb, _ := x509.MarshalPKCS8PrivateKey(key)
		write(name+"-cert.pem", "CERTIFICATE", der)
		write(name+"-key.pem", "PRIVATE KEY", kb)
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	issue("localhost", 2, x509.ExtKeyUsageServerAuth)
	client = issue("client", 3, x509.ExtKeyUsageClientAuth)
	return dir, pool, client
}

// -tls-ca admits clients with a certificate from the CA, refuses others
// and plaintext, and is refused without a server certificate.
func TestServeTLSClientCA(t *testing.T) {
	dir, pool, client := tlsTestCerts(t)
	f := func(name string) string { return filepath.Join(dir, name) }
	sock := testenv.SocketPath(t, "s")
	ctx, cancel := context.WithCancel(context.Background())
	_, done, log := startRun(t, ctx, "-size", "1M", "-unix", sock,
		"-tls-cert", f("localhost-cert.pem"), "-tls-key", f("localhost-key.pem"), "-tls-ca", f("ca.pem"))
	uri := "nbd+unix:///?socket=" + url.QueryEscape(sock)
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()

	c, err := nbd.Dial(dctx, uri, nbd.WithTLS(&tls.Config{RootCAs: pool, ServerName: "localhost", Certificates: []tls.Certificate{client}}))
	if err != nil {
		t.Fatalf("client with a certificate: %v\n%s", err, log)
	}
	if _, err := c.WriteAt([]byte("ok"), 0); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if c, err := nbd.Dial(dctx, uri, nbd.WithTLS(&tls.Config{RootCAs: pool, ServerName: "localhost"})); err == nil {
		c.Close()
		t.Fatal("client without a certificate admitted")
	}
	// -tls-ca implies -tls-require: plaintext is refused.
	if c, err := nbd.Dial(dctx, uri); err == nil {
		c.Close()
		t.Fatal("plaintext client admitted")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}

	// A cancelled context: a run that accepted its flags returns at once.
	stopped, stop := context.WithCancel(context.Background())
	stop()
	for _, args := range [][]string{
		{"-size", "1M", "-unix", testenv.SocketPath(t, "x"), "-tls-ca", f("ca.pem")},
		{"-size", "1M", "-unix", testenv.SocketPath(t, "y"), "-tls-cert", f("localhost-cert.pem"), "-tls-key", f("localhost-key.pem"), "-tls-ca", f("localhost-key.pem")},
	} {
		if err := run(stopped, args, io.Discard, nil); err == nil {
			t.Errorf("run %q: accepted", args)
		}
	}
}
