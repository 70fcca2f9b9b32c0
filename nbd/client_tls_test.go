package nbd

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nhdkit/nhd/internal/testenv"
)

// clientWriteCerts makes a CA and a server certificate for localhost and
// 127.0.0.1 and writes them as nbdkit's --tls-certificates directory wants
// them (ca-cert.pem, server-cert.pem, server-key.pem). It returns the
// directory and a pool holding the CA.
func clientWriteCerts(t *testing.T) (string, *x509.CertPool) {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "nhd test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "localhost"},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, b []byte, mode os.FileMode) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("ca-cert.pem", "CERTIFICATE", caDER, 0o644)
	write("server-cert.pem", "CERTIFICATE", der, 0o644)
	write("server-key.pem", "PRIVATE KEY", keyDER, 0o600)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return dir, pool
}

func TestClientTLSNbdkit(t *testing.T) {
	certs, pool := clientWriteCerts(t)
	_, uri := clientNbdkit(t, "--tls=require", "--tls-certificates="+certs, "memory", "size=16M")
	sock := uri[len("nbd+unix:///?socket="):]
	ctx := context.Background()

	// Plaintext is refused by the server, with a typed error and a hint.
	if _, err := Dial(ctx, uri); !errors.Is(err, ErrOptTLSRequired) {
		t.Fatalf("plaintext to --tls=require: %v", err)
	}
	// An nbds URI with the CA from tls-certificates.
	c := clientDial(t, "nbds+unix:///?socket="+sock+"&tls-certificates="+certs+"&tls-hostname=localhost")
	if !c.TLS() {
		t.Fatal("TLS() false on an nbds connection")
	}
	clientHammer(t, c, 8, 50, 4096)
	big := bytes.Repeat([]byte{0x77}, 3<<20)
	if _, err := c.WriteAt(big, 1<<20); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(big))
	if _, err := c.ReadAt(got, 1<<20); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("large TLS read back: %v", err)
	}
	// WithTLS with a caller's config.
	c2 := clientDial(t, uri, WithTLS(&tls.Config{RootCAs: pool, ServerName: "localhost"}))
	if _, err := c2.ReadAt(got[:4096], 1<<20); err != nil || got[0] != 0x77 {
		t.Fatalf("WithTLS read: %v", err)
	}
	// A certificate that does not verify ends the connection.
	_, err := Dial(ctx, "nbds+unix:///?socket="+sock+"&tls-hostname=localhost")
	var uerr x509.UnknownAuthorityError
	if err == nil || !errors.As(err, &uerr) {
		t.Fatalf("unknown CA: %v", err)
	}
	// ... unless verification is off.
	c3 := clientDial(t, "nbds+unix:///?socket="+sock+"&tls-verify-peer=0")
	if !c3.TLS() {
		t.Fatal("no TLS")
	}
	// Exports can be listed over TLS.
	if _, err := ListExports(ctx, "nbds+unix:///?socket="+sock+"&tls-certificates="+certs); err != nil {
		t.Fatal(err)
	}
}

// An nbds URI to a server without TLS fails: no downgrade.
func TestClientTLSNoDowngradeNbdkit(t *testing.T) {
	testenv.Need(t, "nbdkit", "nbdkit")
	_, uri := clientNbdkit(t, "memory", "size=1M")
	sock := uri[len("nbd+unix:///?socket="):]
	_, err := Dial(context.Background(), "nbds+unix:///?socket="+sock+"&tls-verify-peer=0")
	if !errors.Is(err, ErrTLSUnavailable) {
		t.Fatalf("nbds to a server without TLS: %v", err)
	}
}
