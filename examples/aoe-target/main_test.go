package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nhdkit/nhd/ata"
	"github.com/nhdkit/nhd/ata/aoe"
	"github.com/nhdkit/nhd/internal/testenv"
	"github.com/nhdkit/nhd/nbd"
)

func TestBadArguments(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-bogus"}, "not defined"},
		{[]string{"-size", "1m"}, "exactly one of -iface and -unixgram"},
		{[]string{"-iface", "x"}, "give a backend"},
		{[]string{"-iface", "x", "-size", "1m", "-slot", "255"}, "bad address"},
		{[]string{"-iface", "x", "-size", "1m", "-bufcnt", "1"}, "-bufcnt"},
		{[]string{"-iface", "x", "-uri", "nbd://h/e", "-file", "f"}, "excludes"},
		{[]string{"-iface", "x", "-size", "lots"}, "bad -size"},
		{[]string{"-iface", "no-such-interface0", "-size", "1m"}, "no such network interface"},
		{[]string{"-iface", "x", "-uri", "nbd://127.0.0.1:1/e"}, "connection refused"},
	} {
		err := run(context.Background(), tc.args, new(bytes.Buffer))
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: error %v, want one line with %q", tc.args, err, tc.want)
		}
	}
}

// peer is the initiator's end of a unixgram wire.
type peer struct {
	t    *testing.T
	conn *net.UnixConn
	to   *net.UnixAddr
	tag  uint32
}

var initiator = aoe.MAC{0x52, 0x54, 0x00, 0x01, 0x02, 0x03}

func (p *peer) ata(flags aoe.ATAFlags, op, scnt uint8, lba uint64, data []byte) (aoe.ATAArg, []byte) {
	p.t.Helper()
	p.tag++
	b := make([]byte, aoe.ATADataOffset)
	(&aoe.Header{Dst: aoe.BroadcastMAC, Src: initiator, Version: 1, Major: 0, Minor: 1, Tag: p.tag}).Put(b)
	(&aoe.ATAArg{Flags: flags, SectorCount: scnt, CmdStatus: op, LBA: lba}).Put(b)
	b = append(b, data...)
	buf := make([]byte, 2048)
	for try := 0; try < 50; try++ { // the target may not be listening yet
		p.conn.WriteToUnix(b, p.to)
		p.conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		for {
			n, _, err := p.conn.ReadFromUnix(buf)
			if err != nil {
				break
			}
			var h aoe.Header
			var a aoe.ATAArg
			if aoe.ParseHeader(buf[:n], &h) == nil && h.Tag == p.tag && h.Command == aoe.CmdATA && aoe.ParseATAArg(buf[:n], &a) == nil {
				return a, buf[aoe.ATADataOffset:n]
			}
		}
	}
	p.t.Fatal("no reply from aoe-target")
	return aoe.ATAArg{}, nil
}

// TestServeUnixgram runs the command on a memory disk and on an NBD
// export, and drives each with IDENTIFY, a write and a read.
func TestServeUnixgram(t *testing.T) {
	srv, sock, flushes := serveExport(t)
	defer srv.Close()
	for name, backend := range map[string][]string{
		"memory": {"-size", "1m"},
		"nbd":    {"-uri", "nbd+unix:///e?socket=" + sock},
		"file":   {"-file", filepath.Join(t.TempDir(), "disk"), "-size", "1m", "-sync"},
	} {
		t.Run(name, func(t *testing.T) {
			p, stop := startUnixgram(t, backend...)
			before := flushes.Load()
			defer func() {
				if err := stop(); err != nil {
					t.Errorf("run: %v", err)
				}
				// AoE has no flush: the target flushes the export as it stops.
				if name == "nbd" && flushes.Load() == before {
					t.Error("the NBD export was not flushed as the target stopped")
				}
			}()
			a, data := p.ata(0, 0xEC, 1, 0, nil)
			id, err := ata.ParseIdentify(data)
			if err != nil || a.CmdStatus != 0x50 {
				t.Fatalf("IDENTIFY status %#x: %v", a.CmdStatus, err)
			}
			if got := uint64(id[100]) | uint64(id[101])<<16; got != 2048 {
				t.Errorf("IDENTIFY says %d sectors", got)
			}
			w := bytes.Repeat([]byte("nhd-aoe!"), 64)
			if a, _ := p.ata(aoe.ATAExtended|aoe.ATAWrite, 0x34, 1, 7, w); a.CmdStatus != 0x50 {
				t.Fatalf("write status %#x error %#x", a.CmdStatus, a.ErrFeature)
			}
			if a, r := p.ata(aoe.ATAExtended, 0x24, 1, 7, nil); a.CmdStatus != 0x50 || !bytes.Equal(r, w) {
				t.Fatalf("read status %#x, data equal %v", a.CmdStatus, bytes.Equal(r, w))
			}
		})
	}
}

// When the NBD export behind the target goes away, each ATA command is
// answered with ERR (UNC for a read, DF|ERR with ABRT for a write)
// rather than hang, and the command still stops when told to, failing.
func TestServeUnixgramUpstreamGone(t *testing.T) {
	srv, sock, _ := serveExport(t)
	p, stop := startUnixgram(t, "-uri", "nbd+unix:///e?socket="+sock)
	w := bytes.Repeat([]byte("nhd-aoe!"), 64)
	if a, _ := p.ata(aoe.ATAExtended|aoe.ATAWrite, 0x34, 1, 7, w); a.CmdStatus != 0x50 {
		t.Fatalf("write status %#x error %#x", a.CmdStatus, a.ErrFeature)
	}
	srv.Close()
	if a, _ := p.ata(aoe.ATAExtended, 0x24, 1, 7, nil); a.CmdStatus&0x01 == 0 || a.ErrFeature&0x40 == 0 {
		t.Errorf("read with the export gone: status %#x error %#x, want ERR and UNC", a.CmdStatus, a.ErrFeature)
	}
	if a, _ := p.ata(aoe.ATAExtended|aoe.ATAWrite, 0x34, 1, 7, w); a.CmdStatus&0x21 != 0x21 || a.ErrFeature&0x04 == 0 {
		t.Errorf("write with the export gone: status %#x error %#x, want DF|ERR and ABRT", a.CmdStatus, a.ErrFeature)
	}
	// The target flushes its backend as it stops; with the export gone
	// that fails, and says so on one line.
	if err := stop(); err == nil || !strings.Contains(err.Error(), "flushing the backend") || strings.Contains(err.Error(), "\n") {
		t.Errorf("the command's end: %v, want one line saying the flush failed", err)
	}
}

// flushCounter is a memory disk that counts the flushes it gets.
type flushCounter struct {
	*nbd.MemDisk
	n atomic.Int64
}

func (f *flushCounter) Flush(ctx context.Context) error {
	f.n.Add(1)
	return f.MemDisk.Flush(ctx)
}

// serveExport serves a 1 MiB memory disk as NBD export "e" on a unix
// socket and returns the server, the socket's path and the disk's count
// of flushes.
func serveExport(t *testing.T) (*nbd.Server, string, *atomic.Int64) {
	t.Helper()
	disk := &flushCounter{MemDisk: nbd.NewMemDisk(1 << 20)}
	srv := &nbd.Server{Exports: []nbd.Export{{Name: "e", Backend: disk}}}
	sock := testenv.SocketPath(t, "nbd.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	return srv, sock, &disk.n
}

// startUnixgram runs the command with args on a unixgram wire whose other
// end it returns, and a function that stops the command and returns its
// error (failing the test if it does not stop within 10 s).
func startUnixgram(t *testing.T, args ...string) (*peer, func() error) {
	t.Helper()
	dir := testenv.SocketDir(t)
	tpath, ppath := filepath.Join(dir, "t"), filepath.Join(dir, "p")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: ppath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, append([]string{"-unixgram", tpath + "," + ppath}, args...), io.Discard) }()
	stop := func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("aoe-target does not stop")
			return nil
		}
	}
	return &peer{t: t, conn: c, to: &net.UnixAddr{Name: tpath, Net: "unixgram"}}, stop
}
