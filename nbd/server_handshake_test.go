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
	"encoding/binary"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// serverTestTLS makes a self-signed certificate for "localhost" and
// returns a server config and a client config that trusts it.
func serverTestTLS(t testing.TB) (server, client *tls.Config) {
	t.Helper()
	s, c, _ := serverTestCert(t)
	return s, c
}

// serverTestTLSDir also writes the certificate as ca-cert.pem in a
// directory, as libnbd's tls-certificates wants.
func serverTestTLSDir(t testing.TB) (*tls.Config, string) {
	t.Helper()
	s, _, der := serverTestCert(t)
	dir := t.TempDir()
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(filepath.Join(dir, "ca-cert.pem"), pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	return s, dir
}

func serverTestCert(t testing.TB) (server, client *tls.Config, der []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true,
	}
	der, err = x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}},
		&tls.Config{RootCAs: pool, ServerName: "localhost"}, der
}

func TestServerRequireTLS(t *testing.T) {
	scfg, ccfg := serverTestTLS(t)
	d := NewMemDisk(1 << 20)
	path := serverTestStart(t, &Server{TLSConfig: scfg, RequireTLS: true, Exports: []Export{{Name: "secret", Backend: d}}})
	c := serverTestDial(t, path)
	c.hello(ClientFixedNewstyle | ClientNoZeroes)
	// FORCEDTLS: every option but STARTTLS and ABORT gets TLS_REQD,
	// unknown ones included.
	for _, o := range []OptionCode{OptList, OptStructuredReply, OptGo, OptInfo, OptionCode(77)} {
		if rs := c.opt(o, nil); len(rs) != 1 || rs[0].typ != RepErrTLSReqd {
			t.Fatalf("%v before TLS: %+v, want ERR_TLS_REQD", o, rs)
		}
	}
	if rs := c.opt(OptStartTLS, []byte{1}); rs[0].typ != RepErrInvalid {
		t.Fatalf("STARTTLS with data: %v", rs[0].typ)
	}
	if rs := c.opt(OptStartTLS, nil); rs[0].typ != RepAck {
		t.Fatalf("STARTTLS: %v", rs[0].typ)
	}
	tc := tls.Client(c.nc, ccfg)
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	c.nc = tc
	if rs := c.opt(OptStartTLS, nil); rs[0].typ != RepErrInvalid {
		t.Fatalf("second STARTTLS: %v, want ERR_INVALID", rs[0].typ)
	}
	// Now everything works, over TLS.
	if rs := c.opt(OptStructuredReply, nil); rs[0].typ != RepAck {
		t.Fatalf("STRUCTURED_REPLY over TLS: %v", rs[0].typ)
	}
	rs := c.opt(OptGo, AppendInfoRequest(nil, &InfoRequest{Name: "secret"}))
	if rs[len(rs)-1].typ != RepAck {
		t.Fatalf("GO over TLS: %+v", rs)
	}
	data := []byte("over tls")
	c.request(CmdWrite, FlagFUA, 1, 100, uint32(len(data)), data)
	if s, _ := c.anyReply(); s == nil || s.Error != 0 {
		t.Fatalf("write over TLS: %+v", s)
	}
	c.request(CmdRead, 0, 2, 100, uint32(len(data)), nil)
	if got, _, err := serverTestAssemble(t, c.chunks(), 100, len(data)); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read over TLS: %q, %v", got, err)
	}
}

// EXPORT_NAME before TLS cannot be refused, so the server hangs up.
func TestServerRequireTLSExportName(t *testing.T) {
	scfg, _ := serverTestTLS(t)
	path := serverTestStart(t, &Server{TLSConfig: scfg, RequireTLS: true, Exports: []Export{{Backend: NewMemDisk(4096)}}})
	c := serverTestDial(t, path)
	c.hello(ClientFixedNewstyle)
	c.sendOpt(OptExportName, nil)
	if n, err := io.ReadFull(c.nc, make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("EXPORT_NAME before TLS answered: %d, %v", n, err)
	}
}

// The package's client over TLS to the server (nbds+unix).
func TestServerClientTLS(t *testing.T) {
	scfg, ccfg := serverTestTLS(t)
	d := NewMemDisk(1 << 20)
	path := serverTestStart(t, &Server{TLSConfig: scfg, RequireTLS: true, Exports: []Export{{Backend: d}}})
	c, err := Dial(context.Background(), "nbds+unix:///?socket="+path, WithTLS(ccfg))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !c.TLS() {
		t.Fatal("client says TLS is off")
	}
	if _, err := c.WriteAt([]byte("secret"), 10); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 6)
	d.ReadAt(got, 10)
	if string(got) != "secret" {
		t.Fatalf("disk holds %q", got)
	}
}

func TestServerNoTLS(t *testing.T) {
	_, path := serverTestDisk(t, 4096, false)
	c := serverTestDial(t, path)
	c.hello(ClientFixedNewstyle)
	if rs := c.opt(OptStartTLS, nil); rs[0].typ != RepErrUnsup {
		t.Fatalf("STARTTLS without TLS config: %v, want ERR_UNSUP", rs[0].typ)
	}
}

func TestServerHandshakeOptions(t *testing.T) {
	d := NewMemDisk(1 << 20)
	path := serverTestStart(t, &Server{Exports: []Export{
		{Name: "disk", Description: "described", Backend: d},
		{Name: "ro", Backend: NewMemDisk(4096), ReadOnly: true, Rotational: true, MinBlockSize: 512, PreferredBlockSize: 8192},
	}})
	c := serverTestDial(t, path)
	c.hello(ClientFixedNewstyle | ClientNoZeroes)
	typ := func(rs []serverTestReply) []OptionReplyType {
		var ts []OptionReplyType
		for _, r := range rs {
			ts = append(ts, r.typ)
		}
		return ts
	}
	meta := func(export string, qs ...string) []byte {
		return AppendMetaContextRequest(nil, &MetaContextRequest{Export: export, Queries: qs})
	}
	tests := []struct {
		name string
		opt  OptionCode
		data []byte
		want []OptionReplyType
	}{
		{"list with data", OptList, []byte{1}, []OptionReplyType{RepErrInvalid}},
		{"info unknown export", OptInfo, AppendInfoRequest(nil, &InfoRequest{Name: "nope"}), []OptionReplyType{RepErrUnknown}},
		{"info malformed", OptInfo, []byte{0, 0, 0, 9, 'x'}, []OptionReplyType{RepErrInvalid}},
		{"meta before structured", OptSetMetaContext, meta("disk", "base:allocation"), []OptionReplyType{RepErrInvalid}},
		{"structured with data", OptStructuredReply, []byte{0}, []OptionReplyType{RepErrInvalid}},
		{"structured", OptStructuredReply, nil, []OptionReplyType{RepAck}},
		{"list meta, all", OptListMetaContext, meta("disk"), []OptionReplyType{RepMetaContext, RepAck}},
		{"list meta, base wildcard", OptListMetaContext, meta("disk", "base:"), []OptionReplyType{RepMetaContext, RepAck}},
		{"list meta, other namespace", OptListMetaContext, meta("disk", "qemu:dirty-bitmap:a"), []OptionReplyType{RepAck}},
		{"set meta, base: selects nothing", OptSetMetaContext, meta("disk", "base:"), []OptionReplyType{RepAck}},
		{"set meta, no colon", OptSetMetaContext, meta("disk", "allocation"), []OptionReplyType{RepErrInvalid}},
		{"set meta, unknown export", OptSetMetaContext, meta("nope", "base:allocation"), []OptionReplyType{RepErrUnknown}},
		{"set meta, malformed", OptSetMetaContext, []byte{0, 0, 0, 0, 0, 0, 0, 5}, []OptionReplyType{RepErrInvalid}},
		{"peek export", OptPeekExport, nil, []OptionReplyType{RepErrUnsup}},
		{"extended headers", OptExtendedHeaders, nil, []OptionReplyType{RepErrUnsup}},
		{"too big", OptionCode(50), make([]byte, serverMaxOptionData+1), []OptionReplyType{RepErrTooBig}},
		{"info ro", OptInfo, AppendInfoRequest(nil, &InfoRequest{Name: "ro", Requests: []InfoType{InfoName, InfoDescription, 1000}}), []OptionReplyType{RepInfo, RepInfo, RepInfo, RepAck}},
	}
	for _, tc := range tests {
		if got := typ(c.opt(tc.opt, tc.data)); !cmp.Equal(got, tc.want) {
			t.Errorf("%s: replies %v, want %v", tc.name, got, tc.want)
		}
	}
	// INFO's items for the read-only export, in full.
	rs := c.opt(OptInfo, AppendInfoRequest(nil, &InfoRequest{Name: "ro", Requests: []InfoType{InfoName}}))
	var info ExportInfo
	for _, r := range rs[:len(rs)-1] {
		if _, err := ParseInfo(r.data, &info); err != nil {
			t.Fatal(err)
		}
	}
	want := ExportInfo{Size: 4096, Flags: ExportHasFlags | ExportReadOnly | ExportRotational | ExportSendCache | ExportCanMultiConn |
		ExportSendFlush | ExportSendFUA | ExportSendDF, Name: "ro", MinBlock: 512, PreferredBlock: 8192, MaxPayload: DefaultServerMaxPayload}
	if diff := cmp.Diff(want, info); diff != "" {
		t.Fatalf("INFO ro (-want +got):\n%s", diff)
	}
	// SET on one export, GO on another: no block status.
	c.opt(OptSetMetaContext, meta("ro", "base:allocation"))
	c.opt(OptGo, AppendInfoRequest(nil, &InfoRequest{Name: "disk"}))
	c.request(CmdBlockStatus, 0, 1, 0, 512, nil)
	cs := c.chunks()
	if e, err := ParseErrorChunk(cs[0].Type, cs[0].payload); err != nil || e.Error != EINVAL {
		t.Fatalf("block status with the context set on another export: %+v %v", e, err)
	}
}

func TestServerMinBlockSize(t *testing.T) {
	path := serverTestStart(t, &Server{Exports: []Export{{Backend: NewMemDisk(1 << 20), MinBlockSize: 4096}}})
	c := serverTestDial(t, path)
	info := c.negotiate("", false, false)
	if info.MinBlock != 4096 || info.PreferredBlock != 4096 {
		t.Fatalf("block sizes %+v", info)
	}
	c.request(CmdRead, 0, 1, 512, 4096, nil)
	if r, _ := c.simple(0); r.Error != EINVAL {
		t.Fatalf("unaligned read: %v, want EINVAL", r.Error)
	}
	c.request(CmdRead, 0, 2, 4096, 4096, nil)
	if r, _ := c.simple(4096); r.Error != 0 {
		t.Fatalf("aligned read: %v", r.Error)
	}
}

func TestServerHandshakeHangUps(t *testing.T) {
	_, path := serverTestDisk(t, 4096, false)
	for _, tc := range []struct {
		name string
		send []byte
	}{
		{"unknown client flag", binary.BigEndian.AppendUint32(nil, 1<<5)},
		{"bad option magic", append(binary.BigEndian.AppendUint32(nil, 1), bytes.Repeat([]byte{0xab}, 16)...)},
		{"unknown export by name", func() []byte {
			b := binary.BigEndian.AppendUint32(nil, 1)
			var h [OptionHeaderSize]byte
			(&OptionHeader{Option: OptExportName, Length: 4}).Put(&h)
			return append(append(b, h[:]...), "nope"...)
		}()},
		{"non-fixed client sends LIST", func() []byte {
			b := binary.BigEndian.AppendUint32(nil, 0)
			var h [OptionHeaderSize]byte
			(&OptionHeader{Option: OptList}).Put(&h)
			return append(b, h[:]...)
		}()},
		{"huge option", func() []byte {
			b := binary.BigEndian.AppendUint32(nil, 1)
			var h [OptionHeaderSize]byte
			(&OptionHeader{Option: OptInfo, Length: 1 << 30}).Put(&h)
			return append(b, h[:]...)
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := serverTestDial(t, path)
			c.read(18)
			c.write(tc.send)
			if b, err := io.ReadAll(c.nc); err != nil || len(b) != 0 {
				t.Fatalf("server answered %q (%v); want a hang-up", b, err)
			}
		})
	}
}

// ABORT is acknowledged and the connection closed.
func TestServerAbort(t *testing.T) {
	_, path := serverTestDisk(t, 4096, false)
	c := serverTestDial(t, path)
	c.hello(ClientFixedNewstyle)
	if rs := c.opt(OptAbort, []byte("ignored")); rs[0].typ != RepAck {
		t.Fatalf("ABORT: %v", rs[0].typ)
	}
	if b, _ := io.ReadAll(c.nc); len(b) != 0 {
		t.Fatalf("data after ABORT: %q", b)
	}
}

// Connections beyond MaxConns sessions are refused with a reason; the
// others work, and a place freed is taken again.
func TestServerMaxConns(t *testing.T) {
	s := &Server{MaxConns: 2, Exports: []Export{{Backend: NewMemDisk(1 << 20)}}}
	path := serverTestStart(t, s)
	a, b := serverTestDial(t, path), serverTestDial(t, path)
	a.negotiate("", false, false)
	b.negotiate("", false, false)
	serverWaitSessions(t, s, 2)
	c := serverTestDial(t, path)
	c.hello(ClientFixedNewstyle)
	if rs := c.opt(OptList, nil); rs[len(rs)-1].typ != RepErrShutdown {
		t.Fatalf("third connection: %v, want ERR_SHUTDOWN", rs[len(rs)-1].typ)
	}
	a.nc.Close()
	serverWaitConns(t, s, 1)
	d := serverTestDial(t, path)
	d.negotiate("", false, false)
	serverHealthCheck(t, d, 3)
}

func TestServerConfigErrors(t *testing.T) {
	d := NewMemDisk(4096)
	for _, tc := range []struct {
		name string
		s    *Server
	}{
		{"no backend", &Server{Exports: []Export{{Name: "x"}}}},
		{"duplicate", &Server{Exports: []Export{{Backend: d}, {Backend: d}}}},
		{"min block not power of two", &Server{Exports: []Export{{Backend: d, MinBlockSize: 1000}}}},
		{"min block too big", &Server{Exports: []Export{{Backend: d, MinBlockSize: 1 << 17}}}},
		{"preferred too small", &Server{Exports: []Export{{Backend: d, PreferredBlockSize: 256}}}},
		{"payload below preferred", &Server{MaxPayload: 1024, Exports: []Export{{Backend: d}}}},
		{"TLS required without config", &Server{RequireTLS: true, Exports: []Export{{Backend: d}}}},
		{"long name", &Server{Exports: []Export{{Name: string(make([]byte, 4097)), Backend: d}}}},
		{"payload above 2 GiB", &Server{MaxPayload: 1<<31 + 4096, Exports: []Export{{Backend: d}}}},
	} {
		l, err := net.Listen("unix", serverTestSocket(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := tc.s.Serve(l); err == nil {
			t.Errorf("%s: Serve accepted the configuration", tc.name)
		}
	}
}
