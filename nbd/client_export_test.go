package nbd

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nhdkit/nhd/internal/testenv"
)

// proxyStatusCounter is a Backend over a MemDisk that counts the calls of
// its BlockStatus. It embeds the disk as a plain Backend, so the server
// finds no Lender and reads through ReadAt.
type proxyStatusCounter struct {
	Backend
	disk  *MemDisk
	calls atomic.Int64
}

func (d *proxyStatusCounter) BlockStatus(ctx context.Context, off, length int64, dst []Extent) ([]Extent, error) {
	d.calls.Add(1)
	return d.disk.BlockStatus(ctx, off, length, dst)
}

// proxyNoMultiConn hides MemDisk's CanMultiConn (and everything else but
// Backend's methods).
type proxyNoMultiConn struct{ Backend }

// proxyStart serves e on a fresh unix socket, dials it and returns the
// client.
func proxyStart(t *testing.T, e Export, opts ...Option) *Client {
	t.Helper()
	path := serverTestStart(t, &Server{Exports: []Export{e}})
	c, err := Dial(context.Background(), serverTestURI(path, e.Name), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestExportOf serves a client again with ExportOf and checks that the
// proxy's clients see the upstream's export as it is.
func TestExportOf(t *testing.T) {
	up := Export{
		Name: "up", Description: "the upstream disk", Backend: NewMemDisk(4 << 20),
		ReadOnly: true, Rotational: true, MinBlockSize: 512, PreferredBlockSize: 8192,
	}
	c := proxyStart(t, up)
	e := ExportOf(c, "proxy")
	want := Export{
		Name: "proxy", Description: "the upstream disk", ReadOnly: true, Rotational: true,
		MinBlockSize: 512, PreferredBlockSize: 8192, NoReadHoles: true,
	}
	if diff := cmp.Diff(want, e, cmpopts.IgnoreFields(Export{}, "Backend")); diff != "" {
		t.Fatalf("ExportOf (-want +got):\n%s", diff)
	}
	if e.Backend != Backend(c) {
		t.Fatal("ExportOf's Backend is not the client")
	}
	down := proxyStart(t, e)
	got, upInfo := down.Export(), c.Export()
	if diff := cmp.Diff(upInfo, got, cmpopts.IgnoreFields(ExportInfo{}, "Name")); diff != "" {
		t.Fatalf("the proxy's export differs from the upstream's (-upstream +proxy):\n%s", diff)
	}
	if got.Name != "proxy" {
		t.Fatalf("proxy export name %q", got.Name)
	}

	// An upstream that advertised no block sizes gives none.
	plain := proxyStart(t, Export{Backend: NewMemDisk(1 << 20)}, WithStructuredReplies(false))
	if e := ExportOf(plain, ""); e.MinBlockSize != 1 || e.PreferredBlockSize != 4096 {
		t.Fatalf("block sizes %d, %d; want the upstream's 1, 4096", e.MinBlockSize, e.PreferredBlockSize)
	}
}

// TestClientCanMultiConn checks that a proxy advertises CAN_MULTI_CONN
// exactly when its upstream does.
func TestClientCanMultiConn(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backend Backend
		want    bool
	}{
		{"multi-conn upstream", NewMemDisk(1 << 20), true},
		{"single-conn upstream", proxyNoMultiConn{NewMemDisk(1 << 20)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := proxyStart(t, Export{Backend: tc.backend})
			if got := c.CanMultiConn(); got != tc.want {
				t.Fatalf("CanMultiConn() = %v, want %v", got, tc.want)
			}
			down := proxyStart(t, ExportOf(c, ""))
			if got := down.Flags().Has(ExportCanMultiConn); got != tc.want {
				t.Fatalf("proxy advertises CAN_MULTI_CONN %v, want %v", got, tc.want)
			}
		})
	}
}

// proxyCountingListener counts the connections it accepts.
type proxyCountingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *proxyCountingListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return nc, err
}

// TestProxyNbdcopyMultiConn copies nbdkit's memory disk through a proxy
// (this package's Server over its Client) with nbdcopy --connections=4:
// nbdcopy opens several connections to the proxy, as it does to nbdkit.
func TestProxyNbdcopyMultiConn(t *testing.T) {
	nbdcopy := testenv.Need(t, "nbdcopy", "libnbd-bin")
	_, upURI := clientNbdkit(t, "memory", "size=8M")
	c := clientDial(t, upURI, WithConnections(2))
	if !c.CanMultiConn() {
		t.Fatal("nbdkit memory did not advertise CAN_MULTI_CONN")
	}
	want := bytes.Repeat([]byte("proxied "), 1<<14)
	if _, err := c.WriteAt(want, 1<<20); err != nil {
		t.Fatal(err)
	}
	sock := testenv.SocketPath(t, "proxy.sock")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	l := &proxyCountingListener{Listener: ul}
	srv := &Server{Exports: []Export{ExportOf(c, "")}}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	defer func() {
		srv.Close()
		<-done
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dst := filepath.Join(t.TempDir(), "copy.img")
	out, err := exec.CommandContext(ctx, nbdcopy, "--connections=4", "--threads=4", "nbd+unix:///?socket="+sock, dst).CombinedOutput()
	if err != nil {
		t.Fatalf("nbdcopy: %v\n%s", err, out)
	}
	img, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if len(img) != 8<<20 || !bytes.Equal(img[1<<20:][:len(want)], want) {
		t.Fatalf("the copy (%d bytes) is not the upstream's disk", len(img))
	}
	// nbdcopy caps its connections at its threads (the cores by default).
	if n := l.n.Load(); n < 4 {
		t.Fatalf("nbdcopy opened %d connections to the proxy, want at least 4 (%s)", n, strings.TrimSpace(string(out)))
	}
}

// TestServerNoReadHoles counts the BLOCK_STATUS requests a proxy sends
// upstream while its client reads: one per READ without NoReadHoles, none
// with it, and a client's own BLOCK_STATUS forwarded either way.
func TestServerNoReadHoles(t *testing.T) {
	const reads = 20
	for _, tc := range []struct {
		name        string
		noReadHoles bool
		want        int64
	}{
		{"holes asked for", false, reads},
		{"NoReadHoles", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			disk := NewMemDisk(4 << 20)
			if _, err := disk.WriteAt([]byte{1}, 0); err != nil {
				t.Fatal(err)
			}
			up := &proxyStatusCounter{Backend: disk, disk: disk}
			// The upstream server asks for no holes itself, so the
			// counter counts only the proxy's BLOCK_STATUS requests.
			c := proxyStart(t, Export{Backend: up, NoReadHoles: true})
			e := ExportOf(c, "")
			e.NoReadHoles = tc.noReadHoles
			down := proxyStart(t, e)
			if !down.StructuredReplies() {
				t.Fatal("no structured replies: the server would not ask for holes")
			}
			buf := make([]byte, 128<<10) // data, then a hole
			for i := range reads {
				if _, err := down.ReadAt(buf, int64(i%4)<<20); err != nil {
					t.Fatal(err)
				}
			}
			if got := up.calls.Load(); got != tc.want {
				t.Fatalf("%d upstream BLOCK_STATUS for %d reads, want %d", got, reads, tc.want)
			}
			ext, err := down.BlockStatus(context.Background(), 0, 1<<20, nil)
			if err != nil || len(ext) == 0 {
				t.Fatalf("BLOCK_STATUS through the proxy: %v, %v", ext, err)
			}
			if got := up.calls.Load(); got != tc.want+1 {
				t.Fatalf("BLOCK_STATUS not forwarded: %d upstream calls, want %d", got, tc.want+1)
			}
		})
	}
}

// TestProxyUpstreamFeatures serves clients of upstreams that lack
// features: the proxy does not advertise TRIM the upstream lacks, and
// answers block status (as data) for an upstream without base:allocation.
func TestProxyUpstreamFeatures(t *testing.T) {
	ctx := context.Background()
	// A backend with no Trimmer: the upstream advertises no TRIM.
	c := proxyStart(t, Export{Backend: proxyNoMultiConn{NewMemDisk(1 << 20)}})
	if c.Flags().Has(ExportSendTrim) {
		t.Fatal("the upstream advertises TRIM: the test proves nothing")
	}
	down := proxyStart(t, ExportOf(c, ""))
	if down.Flags().Has(ExportSendTrim) {
		t.Fatal("the proxy advertises TRIM its upstream lacks")
	}
	if _, err := down.WriteAt([]byte("fua"), 0); err != nil {
		t.Fatal(err)
	}
	if err := down.Pwrite(ctx, []byte("fua"), 0, FlagFUA); err != nil {
		t.Fatalf("FUA write through a proxy of an upstream without FUA: %v", err)
	}

	// No base:allocation upstream (no structured replies): block status
	// through the proxy reports the range as data.
	flat := proxyStart(t, Export{Backend: NewMemDisk(1 << 20)}, WithStructuredReplies(false))
	down = proxyStart(t, ExportOf(flat, ""))
	ext, err := down.BlockStatus(ctx, 0, 1<<20, nil)
	if err != nil {
		t.Fatalf("block status through a proxy of an upstream without it: %v", err)
	}
	if diff := cmp.Diff([]Extent{{Length: 1 << 20}}, ext); diff != "" {
		t.Fatalf("extents (-want +got):\n%s", diff)
	}
}
