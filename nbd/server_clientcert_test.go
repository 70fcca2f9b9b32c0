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
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nhdkit/nhd/internal/testenv"
)

// Client certificates (issue 17 item 8): a server that requires them
// admits a client whose certificate its CA signed and no other, whether
// the client is this package's or libnbd's.

// certTestIssuer is a CA that signs test certificates.
type certTestIssuer struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	der  []byte
}

func certTestKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func certTestCA(t *testing.T, name string) *certTestIssuer {
	t.Helper()
	key := certTestKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &certTestIssuer{cert, key, der}
}

// issue signs a certificate for cn with the extended key usage given
// (server certificates also name localhost).
func (ca *certTestIssuer) issue(t *testing.T, cn string, usage x509.ExtKeyUsage) tls.Certificate {
	t.Helper()
	key := certTestKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
	if usage == x509.ExtKeyUsageServerAuth {
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func (ca *certTestIssuer) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// certTestDir writes libnbd's tls-certificates layout: ca-cert.pem, and
// client-cert.pem with client-key.pem when client is not nil.
func certTestDir(t *testing.T, ca *certTestIssuer, client *tls.Certificate) string {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("ca-cert.pem", "CERTIFICATE", ca.der)
	if client != nil {
		key, err := x509.MarshalPKCS8PrivateKey(client.PrivateKey)
		if err != nil {
			t.Fatal(err)
		}
		write("client-cert.pem", "CERTIFICATE", client.Certificate[0])
		write("client-key.pem", "PRIVATE KEY", key)
	}
	return dir
}

// certTestSetup serves a MemDisk under "sec" to clients with a certificate
// from the CA, and returns the socket, the disk and tls-certificates
// directories: one with a valid client certificate, one without any, one
// with a certificate from another CA.
type certTestSetup struct {
	path, good, none, rogue string
	disk                    *MemDisk
	ca                      *certTestIssuer
}

func certTestServe(t *testing.T) *certTestSetup {
	t.Helper()
	ca, other := certTestCA(t, "nhd test CA"), certTestCA(t, "someone else's CA")
	good, rogue := ca.issue(t, "good client", x509.ExtKeyUsageClientAuth), other.issue(t, "rogue client", x509.ExtKeyUsageClientAuth)
	d := NewMemDisk(4 << 20)
	s := &Server{
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{ca.issue(t, "localhost", x509.ExtKeyUsageServerAuth)},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    ca.pool(),
			MinVersion:   tls.VersionTLS12,
		},
		RequireTLS: true,
		Exports:    []Export{{Name: "sec", Backend: d}},
	}
	return &certTestSetup{
		path: serverTestStart(t, s), disk: d, ca: ca,
		good: certTestDir(t, ca, &good), none: certTestDir(t, ca, nil), rogue: certTestDir(t, ca, &rogue),
	}
}

func (st *certTestSetup) uri(dir string) string {
	return "nbds+unix:///sec?socket=" + url.QueryEscape(st.path) + "&tls-certificates=" + url.QueryEscape(dir)
}

// This package's client, through an nbds URI's tls-certificates and
// through WithTLS.
func TestServerClientCertificates(t *testing.T) {
	st := certTestServe(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	c, err := Dial(ctx, st.uri(st.good)+"&tls-hostname=localhost")
	if err != nil {
		t.Fatalf("client with a valid certificate: %v", err)
	}
	if !c.TLS() {
		t.Fatal("TLS() false")
	}
	if _, err := c.WriteAt([]byte("admitted"), 4096); err != nil {
		t.Fatal(err)
	}
	c.Close()
	got := make([]byte, 8)
	st.disk.ReadAt(got, 4096)
	if string(got) != "admitted" {
		t.Fatalf("disk holds %q", got)
	}

	cfg, err := LoadTLSCertificates(st.good)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ServerName = "localhost"
	c, err = Dial(ctx, "nbd+unix:///sec?socket="+url.QueryEscape(st.path), WithTLS(cfg))
	if err != nil {
		t.Fatalf("WithTLS(LoadTLSCertificates): %v", err)
	}
	c.Close()

	for _, tc := range []struct{ name, dir string }{{"no client certificate", st.none}, {"certificate from another CA", st.rogue}} {
		c, err := Dial(ctx, st.uri(tc.dir)+"&tls-hostname=localhost")
		if err == nil {
			c.Close()
			t.Fatalf("%s: admitted", tc.name)
		}
		t.Logf("%s: %v", tc.name, err)
	}
	// WithTLS with a config that trusts the server but has no certificate.
	if c, err := Dial(ctx, "nbd+unix:///sec?socket="+url.QueryEscape(st.path), WithTLS(&tls.Config{RootCAs: st.ca.pool(), ServerName: "localhost"})); err == nil {
		c.Close()
		t.Fatal("WithTLS without a certificate: admitted")
	}
	if st.disk.Allocated() != MemDiskChunkSize {
		t.Fatalf("refused clients changed the disk: %d bytes allocated", st.disk.Allocated())
	}
}

func TestLoadTLSCertificates(t *testing.T) {
	ca := certTestCA(t, "ca")
	cert := ca.issue(t, "c", x509.ExtKeyUsageClientAuth)
	cfg, err := LoadTLSCertificates(certTestDir(t, ca, &cert))
	if err != nil || len(cfg.Certificates) != 1 || !bytes.Equal(cfg.Certificates[0].Certificate[0], cert.Certificate[0]) || cfg.RootCAs == nil {
		t.Fatalf("full directory: %+v, %v", cfg, err)
	}
	if cfg, err := LoadTLSCertificates(certTestDir(t, ca, nil)); err != nil || len(cfg.Certificates) != 0 {
		t.Fatalf("CA only: %+v, %v", cfg, err)
	}
	if _, err := LoadTLSCertificates(t.TempDir()); err == nil {
		t.Fatal("empty directory accepted")
	}
	// A certificate without its key is an error, not a silent anonymous client.
	dir := certTestDir(t, ca, &cert)
	os.Remove(filepath.Join(dir, "client-key.pem"))
	if _, err := LoadTLSCertificates(dir); err == nil {
		t.Fatal("client-cert.pem without client-key.pem accepted")
	}
}

// A TLSConfig whose client certificate check could be bypassed, or would
// trust the system's roots, is refused; sound ones are accepted.
func TestServerClientAuthConfig(t *testing.T) {
	pool := certTestCA(t, "ca").pool()
	d := NewMemDisk(4096)
	for _, tc := range []struct {
		name    string
		cfg     *tls.Config
		require bool
		ok      bool
	}{
		{"verified, TLS optional", &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}, false, false},
		{"any certificate, TLS optional", &tls.Config{ClientAuth: tls.RequireAnyClientCert}, false, false},
		{"verified without ClientCAs", &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert}, true, false},
		{"verified if given without ClientCAs", &tls.Config{ClientAuth: tls.VerifyClientCertIfGiven}, false, false},
		{"verified, TLS required", &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}, true, true},
		{"verified if given, TLS optional", &tls.Config{ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: pool}, false, true},
		{"no client certificates", &tls.Config{}, false, true},
		{"per-client config", &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return nil, nil }}, false, true},
	} {
		s := &Server{TLSConfig: tc.cfg, RequireTLS: tc.require, Exports: []Export{{Backend: d}}}
		if err := s.init(); (err == nil) != tc.ok {
			t.Errorf("%s: init = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

// libnbd (nbdinfo, nbdcopy) with its tls-certificates directory: served
// with a valid client certificate, refused without one or with one from
// another CA.
func TestServerClientCertificatesLibnbd(t *testing.T) {
	nbdinfo := testenv.Need(t, "nbdinfo", "libnbd-bin")
	nbdcopy := testenv.Need(t, "nbdcopy", "libnbd-bin")
	st := certTestServe(t)

	out := testenv.Run(t, 30*time.Second, nbdinfo, "--json", st.uri(st.good))
	var info struct {
		TLS     bool `json:"TLS"`
		Exports []map[string]any
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("nbdinfo --json: %v\n%s", err, out)
	}
	if !info.TLS || len(info.Exports) != 1 || info.Exports[0]["export-size"] != float64(4<<20) {
		t.Fatalf("nbdinfo with a client certificate: %s", out)
	}
	img, want := serverTestImage(t, 4<<20, 7)
	for _, tc := range []struct{ name, dir string }{{"no client certificate", st.none}, {"certificate from another CA", st.rogue}} {
		out, err := testenv.RunErr(30*time.Second, nbdinfo, st.uri(tc.dir))
		if err == nil {
			t.Fatalf("nbdinfo, %s: served\n%s", tc.name, out)
		}
		t.Logf("nbdinfo, %s: %v: %s", tc.name, err, strings.TrimSpace(out))
		if out, err := testenv.RunErr(60*time.Second, nbdcopy, img, st.uri(tc.dir)); err == nil {
			t.Fatalf("nbdcopy, %s: served\n%s", tc.name, out)
		}
	}
	if st.disk.Allocated() != 0 {
		t.Fatalf("refused clients wrote %d bytes", st.disk.Allocated())
	}
	testenv.Run(t, 60*time.Second, nbdcopy, img, st.uri(st.good))
	got := make([]byte, len(want))
	st.disk.ReadAt(got, 0)
	if !bytes.Equal(got, want) {
		t.Fatal("disk differs from the image nbdcopy wrote with a client certificate")
	}
}
