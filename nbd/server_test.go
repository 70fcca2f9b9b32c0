package nbd

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func serverTestDisk(t testing.TB, size int64, ro bool) (*MemDisk, string) {
	d := NewMemDisk(size)
	path := serverTestStart(t, &Server{Exports: []Export{{Name: "disk", Description: "a test disk", Backend: d, ReadOnly: ro}}})
	return d, path
}

func TestServerGoInfo(t *testing.T) {
	_, path := serverTestDisk(t, 1<<20, false)
	c := serverTestDial(t, path)
	info := c.negotiate("disk", true, true)
	want := ExportInfo{
		Size: 1 << 20,
		Flags: ExportHasFlags | ExportSendFlush | ExportSendFUA | ExportSendTrim | ExportSendWriteZeroes |
			ExportSendDF | ExportCanMultiConn | ExportSendCache | ExportSendFastZero,
		MinBlock: 1, PreferredBlock: 4096, MaxPayload: DefaultServerMaxPayload,
	}
	if diff := cmp.Diff(want, info); diff != "" {
		t.Fatalf("GO info (-want +got):\n%s", diff)
	}
	c.request(CmdDisc, 0, 1, 0, 0, nil)
	if n, err := c.nc.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("after DISC read %d, %v; want EOF", n, err)
	}
}

func TestServerReadWriteSimple(t *testing.T) {
	d, path := serverTestDisk(t, 1<<20, false)
	c := serverTestDial(t, path)
	c.negotiate("disk", false, false)
	data := bytes.Repeat([]byte("nhd!"), 3000)
	c.request(CmdWrite, FlagFUA, 7, 5000, uint32(len(data)), data)
	if r, _ := c.simple(0); r.Error != 0 || r.Cookie != 7 {
		t.Fatalf("write reply %+v", r)
	}
	got := make([]byte, len(data))
	if _, err := d.ReadAt(got, 5000); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("backend holds different bytes (err %v)", err)
	}
	c.request(CmdRead, 0, 8, 4999, uint32(len(data)+2), nil)
	r, back := c.simple(len(data) + 2)
	if r.Error != 0 || r.Cookie != 8 {
		t.Fatalf("read reply %+v", r)
	}
	want := append(append([]byte{0}, data...), 0)
	if !bytes.Equal(back, want) {
		t.Fatal("read back differs")
	}
}

func TestServerStructuredReadHoles(t *testing.T) {
	d, path := serverTestDisk(t, 1<<20, false)
	// Data in chunks 1 and 3, holes in 0, 2 and beyond.
	d.WriteAt(bytes.Repeat([]byte{1}, MemDiskChunkSize), MemDiskChunkSize)
	d.WriteAt(bytes.Repeat([]byte{3}, 100), 3*MemDiskChunkSize+10)
	c := serverTestDial(t, path)
	c.negotiate("disk", true, true)

	const off, n = 1000, 5 * MemDiskChunkSize
	c.request(CmdRead, 0, 9, off, n, nil)
	cs := c.chunks()
	got, holes, err := serverTestAssemble(t, cs, off, n)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, n)
	if _, err := d.ReadAt(want, off); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("structured read differs from the disk")
	}
	if wantHoles := MemDiskChunkSize - off + MemDiskChunkSize + MemDiskChunkSize + off; holes != wantHoles {
		t.Fatalf("holes cover %d bytes, want %d (chunks: %d)", holes, wantHoles, len(cs))
	}

	// Under DF a mix of data and holes is one data chunk.
	c.request(CmdRead, FlagDF, 10, off, n, nil)
	cs = c.chunks()
	if len(cs) != 1 || cs[0].Type != ChunkOffsetData || !cs[0].Flags.Has(ReplyFlagDone) {
		t.Fatalf("DF read: %d chunks, first %v", len(cs), cs[0].Type)
	}
	if got, _, _ := serverTestAssemble(t, cs, off, n); !bytes.Equal(got, want) {
		t.Fatal("DF read differs from the disk")
	}

	// Block status describes the same layout.
	c.request(CmdBlockStatus, 0, 11, 0, 4*MemDiskChunkSize, nil)
	cs = c.chunks()
	if len(cs) != 1 || cs[0].Type != ChunkBlockStatus {
		t.Fatalf("block status: %+v", cs)
	}
	id, ext, err := ParseBlockStatus(cs[0].payload, nil)
	if err != nil || id != serverMetaContextID {
		t.Fatalf("block status payload: id %d, %v", id, err)
	}
	hz := ExtentHole | ExtentZero
	wantExt := []Extent{{MemDiskChunkSize, hz}, {MemDiskChunkSize, 0}, {MemDiskChunkSize, hz}, {MemDiskChunkSize, 0}}
	if diff := cmp.Diff(wantExt, ext); diff != "" {
		t.Fatalf("extents (-want +got):\n%s", diff)
	}
	c.request(CmdBlockStatus, FlagReqOne, 12, 0, 4*MemDiskChunkSize, nil)
	cs = c.chunks()
	if _, ext, _ := ParseBlockStatus(cs[0].payload, nil); len(ext) != 1 || ext[0] != wantExt[0] {
		t.Fatalf("REQ_ONE extents %+v", ext)
	}
}

// Errors the spec names for bad requests, with the connection still
// usable after each.
func TestServerRequestErrors(t *testing.T) {
	_, rwPath := serverTestDisk(t, 1<<20, false)
	_, roPath := serverTestDisk(t, 1<<20, true)
	const size = 1 << 20
	tests := []struct {
		name       string
		ro         bool
		structured bool
		typ        Command
		flags      CmdFlags
		off        uint64
		length     uint32
		want       Errno
	}{
		{"read past end", false, false, CmdRead, 0, size - 10, 20, EINVAL},
		{"read offset overflow", false, true, CmdRead, 0, ^uint64(0) - 5, 10, EINVAL},
		{"write past end", false, false, CmdWrite, 0, size - 10, 20, ENOSPC},
		{"zeroes past end", false, false, CmdWriteZeroes, 0, size, 1, ENOSPC},
		{"trim past end", false, false, CmdTrim, 0, size, 1, EINVAL},
		{"cache past end", false, false, CmdCache, 0, size, 1, EINVAL},
		{"block status past end", false, true, CmdBlockStatus, 0, size - 1, 2, EINVAL},
		{"unknown command", false, false, Command(42), 0, 0, 0, EINVAL},
		{"resize", false, false, CmdResize, 0, 0, 0, EINVAL},
		{"unknown flag", false, false, CmdRead, 1 << 9, 0, 512, EINVAL},
		{"DF without structured", false, false, CmdRead, FlagDF, 0, 512, EINVAL},
		{"REQ_ONE on read", false, true, CmdRead, FlagReqOne, 0, 512, EINVAL},
		{"NO_HOLE on write", false, false, CmdWrite, FlagNoHole, 0, 512, EINVAL},
		{"flush with length", false, false, CmdFlush, 0, 0, 512, EINVAL},
		{"read too long", false, false, CmdRead, 0, 0, DefaultServerMaxPayload + 1, EINVAL},
		{"block status without context", false, false, CmdBlockStatus, 0, 0, 512, EINVAL},
		{"write read-only", true, false, CmdWrite, 0, 0, 512, EPERM},
		{"trim read-only", true, true, CmdTrim, 0, 0, 512, EPERM},
		{"zeroes read-only", true, false, CmdWriteZeroes, 0, 0, 512, EPERM},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := rwPath
			if tc.ro {
				path = roPath
			}
			c := serverTestDial(t, path)
			c.negotiate("disk", tc.structured, false)
			var payload []byte
			if tc.typ == CmdWrite {
				payload = make([]byte, tc.length)
			}
			c.request(tc.typ, tc.flags, 77, tc.off, tc.length, payload)
			var got Errno
			if s, ch := c.anyReply(); s != nil {
				got = s.Error
				if s.Cookie != 77 {
					t.Fatalf("cookie %d", s.Cookie)
				}
			} else {
				e, err := ParseErrorChunk(ch.Type, ch.payload)
				if err != nil || !ch.Flags.Has(ReplyFlagDone) || ch.Cookie != 77 {
					t.Fatalf("error chunk %+v: %v", ch.ChunkHeader, err)
				}
				got = e.Error
			}
			if got != tc.want {
				t.Fatalf("error %v, want %v", got, tc.want)
			}
			// The connection still works.
			c.request(CmdRead, 0, 78, 0, 512, nil)
			if tc.structured {
				if _, _, err := serverTestAssemble(t, c.chunks(), 0, 512); err != nil {
					t.Fatal(err)
				}
			} else if r, _ := c.simple(512); r.Error != 0 || r.Cookie != 78 {
				t.Fatalf("read after error: %+v", r)
			}
		})
	}
}

// A structured READ that fails must still get a structured reply.
func TestServerStructuredReadError(t *testing.T) {
	_, path := serverTestDisk(t, 1<<20, false)
	c := serverTestDial(t, path)
	c.negotiate("disk", true, false)
	c.request(CmdRead, 0, 5, 1<<20, 512, nil)
	cs := c.chunks()
	if _, _, err := serverTestAssemble(t, cs, 1<<20, 512); !errors.Is(err, EINVAL) {
		t.Fatalf("error %v, want EINVAL", err)
	}
}

func TestServerBadMagicHangsUp(t *testing.T) {
	_, path := serverTestDisk(t, 1<<20, false)
	c := serverTestDial(t, path)
	c.negotiate("disk", false, false)
	var b [RequestSize]byte
	(&Request{Type: CmdRead, Length: 512}).Put(&b)
	b[0] ^= 0xff
	c.write(b[:])
	if n, err := io.ReadFull(c.nc, make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("after bad magic read %d, %v; want the connection closed", n, err)
	}
}

// A write longer than the maximum payload is read, thrown away and
// refused with EINVAL; the connection goes on.
func TestServerOversizeWrite(t *testing.T) {
	d := NewMemDisk(1 << 20)
	path := serverTestStart(t, &Server{MaxPayload: 64 << 10, Exports: []Export{{Backend: d}}})
	c := serverTestDial(t, path)
	info := c.negotiate("", false, false)
	if info.MaxPayload != 64<<10 {
		t.Fatalf("advertised maximum %d", info.MaxPayload)
	}
	big := bytes.Repeat([]byte{9}, 64<<10+512)
	c.request(CmdWrite, 0, 1, 0, uint32(len(big)), big)
	if r, _ := c.simple(0); r.Error != EINVAL {
		t.Fatalf("oversize write: %v, want EINVAL", r.Error)
	}
	if d.Allocated() != 0 {
		t.Fatal("oversize write reached the backend")
	}
	c.request(CmdRead, 0, 2, 0, 64<<10+512, nil)
	if r, _ := c.simple(0); r.Error != EINVAL {
		t.Fatalf("oversize read: %v, want EINVAL", r.Error)
	}
	c.request(CmdWrite, 0, 3, 0, 4, []byte("abcd"))
	if r, _ := c.simple(0); r.Error != 0 {
		t.Fatalf("write after oversize: %v", r.Error)
	}
	// Beyond what the server reads for nothing: hang-up.
	c.request(CmdWrite, 0, 4, 0, serverDiscardLimit+1, nil)
	if n, err := io.ReadFull(c.nc, make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("after a huge write header read %d, %v; want the connection closed", n, err)
	}
}

// Golden bytes of the server's handshake messages, written out from the
// layouts in proto.md.
func TestServerHandshakeGolden(t *testing.T) {
	path := serverTestStart(t, &Server{Exports: []Export{{Name: "ab", Description: "xy", Backend: NewMemDisk(0x10000)}}})
	c := serverTestDial(t, path)
	// Greeting: NBDMAGIC, IHAVEOPT, flags FIXED_NEWSTYLE|NO_ZEROES.
	c.hello(ClientFixedNewstyle)

	c.sendOpt(OptList, nil)
	got := c.read(OptionReplySize + 4 + 2 + 2 + OptionReplySize)
	want := []byte{
		0x00, 0x03, 0xe8, 0x89, 0x04, 0x55, 0x65, 0xa9, // reply magic
		0, 0, 0, 3, // NBD_OPT_LIST
		0, 0, 0, 2, // NBD_REP_SERVER
		0, 0, 0, 8, // length
		0, 0, 0, 2, 'a', 'b', 'x', 'y', // name length, name, description
		0x00, 0x03, 0xe8, 0x89, 0x04, 0x55, 0x65, 0xa9,
		0, 0, 0, 3,
		0, 0, 0, 1, // NBD_REP_ACK
		0, 0, 0, 0,
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("LIST replies\n got % x\nwant % x", got, want)
	}

	c.sendOpt(OptionCode(99), []byte{1, 2, 3})
	got = c.read(OptionReplySize)
	want = []byte{0x00, 0x03, 0xe8, 0x89, 0x04, 0x55, 0x65, 0xa9, 0, 0, 0, 99, 0x80, 0, 0, 1, 0, 0, 0, 0}
	if !bytes.Equal(got, want) {
		t.Fatalf("unknown option reply\n got % x\nwant % x", got, want)
	}

	// EXPORT_NAME without NO_ZEROES: size, flags, 124 zeroes.
	c.sendOpt(OptExportName, []byte("ab"))
	got = c.read(ExportNameReplySize + ExportNameZeroes)
	want = make([]byte, 134)
	copy(want, []byte{0, 0, 0, 0, 0, 1, 0, 0, 0x0d, 0x6d}) // 64 KiB; flags below
	// HAS_FLAGS|SEND_FLUSH|SEND_FUA|SEND_TRIM|SEND_WRITE_ZEROES|CAN_MULTI_CONN|SEND_CACHE|SEND_FAST_ZERO
	f := ExportHasFlags | ExportSendFlush | ExportSendFUA | ExportSendTrim | ExportSendWriteZeroes | ExportCanMultiConn | ExportSendCache | ExportSendFastZero
	binary.BigEndian.PutUint16(want[8:], uint16(f))
	if !bytes.Equal(got, want) {
		t.Fatalf("EXPORT_NAME reply\n got % x\nwant % x", got, want)
	}
}

// Golden bytes of transmission replies: simple, OFFSET_DATA, OFFSET_HOLE,
// BLOCK_STATUS and ERROR.
func TestServerReplyGolden(t *testing.T) {
	d := NewMemDisk(2 * MemDiskChunkSize)
	d.WriteAt([]byte{0xaa, 0xbb}, MemDiskChunkSize)
	path := serverTestStart(t, &Server{Exports: []Export{{Backend: d}}})
	c := serverTestDial(t, path)
	c.negotiate("", true, true)

	c.request(CmdFlush, 0, 0x0102030405060708, 0, 0, nil)
	want := []byte{0x67, 0x44, 0x66, 0x98, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8}
	if got := c.read(16); !bytes.Equal(got, want) {
		t.Fatalf("flush reply\n got % x\nwant % x", got, want)
	}

	// Read 4 bytes across the hole/data boundary: a hole chunk, then a
	// data chunk with DONE.
	c.request(CmdRead, 0, 5, MemDiskChunkSize-2, 4, nil)
	want = []byte{
		0x66, 0x8e, 0x33, 0xef, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 12, // OFFSET_HOLE
		0, 0, 0, 0, 0, 0, 0xff, 0xfe, 0, 0, 0, 2, // offset 65534, size 2
		0x66, 0x8e, 0x33, 0xef, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 10, // OFFSET_DATA, DONE
		0, 0, 0, 0, 0, 1, 0, 0, 0xaa, 0xbb, // offset 65536, data
	}
	if got := c.read(len(want)); !bytes.Equal(got, want) {
		t.Fatalf("read reply\n got % x\nwant % x", got, want)
	}

	c.request(CmdBlockStatus, 0, 6, 0, 2*MemDiskChunkSize, nil)
	want = []byte{
		0x66, 0x8e, 0x33, 0xef, 0, 1, 0, 5, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0, 20, // BLOCK_STATUS, DONE
		0, 0, 0, 1, // context id
		0, 1, 0, 0, 0, 0, 0, 3, // 64 KiB hole|zero
		0, 1, 0, 0, 0, 0, 0, 0, // 64 KiB data
	}
	if got := c.read(len(want)); !bytes.Equal(got, want) {
		t.Fatalf("block status reply\n got % x\nwant % x", got, want)
	}

	c.request(Command(200), 0, 7, 0, 0, nil)
	msg := "unknown command"
	want = append([]byte{
		0x66, 0x8e, 0x33, 0xef, 0, 1, 0x80, 1, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, byte(6 + len(msg)),
		0, 0, 0, 22, 0, byte(len(msg)),
	}, msg...)
	if got := c.read(len(want)); !bytes.Equal(got, want) {
		t.Fatalf("error reply\n got % x\nwant % x", got, want)
	}
}

// serverBarrierDisk blocks each ReadAt and WriteAt until n of them are in
// progress at once: a server that serves one request at a time deadlocks.
type serverBarrierDisk struct {
	*MemDisk
	serverNotLender
	n       int
	arrived chan struct{}
	mu      sync.Mutex
	release chan struct{}
}

func (d *serverBarrierDisk) wait() {
	d.mu.Lock()
	r := d.release
	d.mu.Unlock()
	d.arrived <- struct{}{}
	<-r
}

func (d *serverBarrierDisk) ReadAt(p []byte, off int64) (int, error) {
	d.wait()
	return d.MemDisk.ReadAt(p, off)
}

func (d *serverBarrierDisk) WriteAt(p []byte, off int64) (int, error) {
	d.wait()
	return d.MemDisk.WriteAt(p, off)
}

// Requests of one connection are served concurrently and answered in
// completion order.
func TestServerConcurrentRequests(t *testing.T) {
	const n = 4
	d := &serverBarrierDisk{MemDisk: NewMemDisk(1 << 20), n: n, arrived: make(chan struct{}), release: make(chan struct{})}
	path := serverTestStart(t, &Server{MaxInFlight: n, Exports: []Export{{Backend: d}}})
	c := serverTestDial(t, path)
	c.negotiate("", false, false)
	for _, typ := range []Command{CmdRead, CmdWrite} {
		var msg []byte
		for i := range n {
			var h [RequestSize]byte
			(&Request{Type: typ, Cookie: uint64(i), Offset: uint64(i) << 16, Length: 64 << 10}).Put(&h)
			msg = append(msg, h[:]...)
			if typ == CmdWrite {
				msg = append(msg, make([]byte, 64<<10)...)
			}
		}
		go c.nc.Write(msg)
		for i := range n {
			select {
			case <-d.arrived:
			case <-time.After(10 * time.Second):
				t.Fatalf("%v: only %d of %d requests reached the backend at once", typ, i, n)
			}
		}
		d.mu.Lock()
		close(d.release)
		d.release = make(chan struct{})
		d.mu.Unlock()
		seen := map[uint64]bool{}
		for range n {
			want := 0
			if typ == CmdRead {
				want = 64 << 10
			}
			r, _ := c.simple(want)
			if r.Error != 0 || seen[r.Cookie] {
				t.Fatalf("%v: reply %+v", typ, r)
			}
			seen[r.Cookie] = true
		}
	}
}

// serverFlakyListener fails Accept with EMFILE a few times first.
type serverFlakyListener struct {
	net.Listener
	fails int
}

func (l *serverFlakyListener) Accept() (net.Conn, error) {
	if l.fails > 0 {
		l.fails--
		return nil, &net.OpError{Op: "accept", Net: "unix", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// Running out of descriptors for a moment does not stop the server.
func TestServerAcceptEMFILE(t *testing.T) {
	s := &Server{Exports: []Export{{Backend: NewMemDisk(4096)}}}
	path := serverTestSocket(t)
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(&serverFlakyListener{Listener: l, fails: 3}) }()
	c := serverTestDial(t, path)
	c.negotiate("", false, false)
	s.Close()
	if err := <-done; !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve = %v", err)
	}
}

// Writes of whole, aligned 64 KiB pages to a bare MemDisk hand the
// payload's pages to the disk and take back the chunks they replace:
// pipelined writes of every shape (one whole chunk or several, rewritten,
// misaligned, FUA, partial, into the short last chunk) read back as a
// model says, and the disk's count of allocated chunks stays right.
func TestServerMemDiskWholeChunkWrites(t *testing.T) {
	const cs = MemDiskChunkSize
	size := int64(4*cs + 4096) // the last chunk is cut short
	d := NewMemDisk(size)
	path := serverTestStart(t, &Server{MaxInFlight: 4, Exports: []Export{{Backend: d}}})
	c := serverTestDial(t, path)
	c.negotiate("", false, false)
	model := make([]byte, size)
	type write struct {
		off   uint64
		n     int
		flags CmdFlags
	}
	// The writes of a batch do not overlap, so any order of serving
	// them gives the model's result.
	batches := [][]write{
		{{0, cs, 0}, {cs, cs, 0}, {2 * cs, cs, FlagFUA}},
		{{0, cs, 0}, {cs, cs, 0}, {3 * cs, cs, 0}},
		{{100, cs, 0}, {2*cs + 4096, 4096, 0}, {3 * cs, cs, FlagFUA}, {4 * cs, 4096, 0}},
		{{cs, 4096, 0}, {2 * cs, cs, 0}, {3 * cs, cs, 0}, {0, cs, 0}},
		{{3 * cs, cs, 0}, {2 * cs, cs, 0}, {cs, cs, 0}, {0, cs, 0}},
		{{cs / 2, cs, 0}, {3 * cs, cs, 0}, {2*cs - 10, 10, 0}},
		{{0, 3 * cs, 0}, {3 * cs, cs, FlagFUA}},
		{{cs, 2 * cs, FlagFUA}, {3 * cs, cs + 4096, 0}, {0, 4096, 0}},
		{{0, 4 * cs, 0}},
		{{100, 2 * cs, 0}, {3 * cs, cs, 0}},
		{{0, 2 * cs, 0}, {2 * cs, 2 * cs, 0}},
	}
	seed := byte(1)
	for bi, batch := range batches {
		var msg []byte
		for i, x := range batch {
			p := make([]byte, x.n)
			for j := range p {
				p[j] = seed + byte(j*7)
			}
			seed += 13
			copy(model[x.off:], p)
			var h [RequestSize]byte
			(&Request{Flags: x.flags, Type: CmdWrite, Cookie: uint64(i), Offset: x.off, Length: uint32(x.n)}).Put(&h)
			msg = append(append(msg, h[:]...), p...)
		}
		go c.nc.Write(msg)
		for range batch {
			if r, _ := c.simple(0); r.Error != 0 {
				t.Fatalf("batch %d: write error %v", bi, r.Error)
			}
		}
		c.request(CmdRead, 0, 99, 0, uint32(size), nil)
		if r, got := c.simple(int(size)); r.Error != 0 || !bytes.Equal(got, model) {
			t.Fatalf("batch %d: read back: error %v, equal to the model %v", bi, r.Error, bytes.Equal(got, model))
		}
		got := make([]byte, size)
		d.ReadAt(got, 0)
		if !bytes.Equal(got, model) {
			t.Fatalf("batch %d: disk differs from the model", bi)
		}
	}
	if got := d.Allocated(); got != 5*cs {
		t.Fatalf("Allocated = %d, want %d", got, 5*cs)
	}
	// The short last chunk cannot take a whole one.
	c.request(CmdWrite, 0, 7, 4*cs, cs, make([]byte, cs))
	if r, _ := c.simple(0); r.Error != ENOSPC {
		t.Fatalf("write past the end: error %v, want ENOSPC", r.Error)
	}
}

// serverPickyTaker is a MemDisk whose TakePage refuses the pages at the
// offsets in refuse, and which logs its TakePage and WriteAt calls.
type serverPickyTaker struct {
	*MemDisk
	refuse map[int64]bool
	mu     sync.Mutex
	log    []string
}

func (d *serverPickyTaker) record(s string) {
	d.mu.Lock()
	d.log = append(d.log, s)
	d.mu.Unlock()
}

func (d *serverPickyTaker) TakePage(p *[PageSize]byte, off int64) (*[PageSize]byte, bool) {
	if d.refuse[off] {
		d.record(fmt.Sprintf("refused %d", off))
		return nil, false
	}
	d.record(fmt.Sprintf("TakePage %d", off))
	return d.MemDisk.TakePage(p, off)
}

func (d *serverPickyTaker) WriteAt(p []byte, off int64) (int, error) {
	d.record(fmt.Sprintf("WriteAt %d+%d", off, len(p)))
	return d.MemDisk.WriteAt(p, off)
}

// A write of several whole pages hands each to the PageTaker in order;
// a page it refuses is written with WriteAt, the others are taken, and
// the disk holds the whole payload.
func TestServerPageTakerRefuses(t *testing.T) {
	const cs = PageSize
	d := &serverPickyTaker{MemDisk: NewMemDisk(8 * cs), refuse: map[int64]bool{3 * cs: true}}
	path := serverTestStart(t, &Server{Exports: []Export{{Backend: d}}})
	c := serverTestDial(t, path)
	c.negotiate("", false, false)
	p := make([]byte, 4*cs)
	for i := range p {
		p[i] = byte(i*5 + i>>16)
	}
	c.request(CmdWrite, 0, 1, 2*cs, uint32(len(p)), p)
	if r, _ := c.simple(0); r.Error != 0 {
		t.Fatalf("write: error %v", r.Error)
	}
	want := []string{"TakePage 131072", "refused 196608", "WriteAt 196608+65536", "TakePage 262144", "TakePage 327680"}
	d.mu.Lock()
	log := d.log
	d.mu.Unlock()
	if diff := cmp.Diff(want, log); diff != "" {
		t.Fatalf("backend calls (-want +got):\n%s", diff)
	}
	got := make([]byte, len(p))
	d.MemDisk.ReadAt(got, 2*cs)
	if !bytes.Equal(got, p) {
		t.Fatal("the disk does not hold the payload")
	}
}

// serverCountingDisk embeds a MemDisk, overrides WriteAt and hides the
// MemDisk's PageTaker (and Lender), as Lender's doc asks of such a type.
type serverCountingDisk struct {
	*MemDisk
	serverNotLender
	writes atomic.Int64
}

func (d *serverCountingDisk) WriteAt(p []byte, off int64) (int, error) {
	d.writes.Add(1)
	return d.MemDisk.WriteAt(p, off)
}

// A type embedding a MemDisk that hides TakePage gets every write through
// its own WriteAt: the server finds backends by interface, not by type.
func TestServerEmbeddedMemDiskWriteAt(t *testing.T) {
	d := &serverCountingDisk{MemDisk: NewMemDisk(1 << 20)}
	path := serverTestStart(t, &Server{Exports: []Export{{Backend: d}}})
	c := serverTestDial(t, path)
	c.negotiate("", false, false)
	p := bytes.Repeat([]byte{0xa5}, MemDiskChunkSize)
	for i := range 3 {
		c.request(CmdWrite, 0, uint64(i), uint64(i)*MemDiskChunkSize, MemDiskChunkSize, p)
		if r, _ := c.simple(0); r.Error != 0 {
			t.Fatalf("write: error %v", r.Error)
		}
	}
	if n := d.writes.Load(); n != 3 {
		t.Fatalf("WriteAt called %d times, want 3", n)
	}
}

// A slot keeps its list of pages between writes only up to
// serverKeptPages: a huge write's list goes (its pages go back to the
// free pages either way).
func TestServerDropPayloadKeptPages(t *testing.T) {
	c := &serverConn{srv: &Server{bufs: newServerBuffers()}}
	for _, n := range []int{1, serverPageGroup, serverKeptPages, serverKeptPages + 1, 1024} {
		s := &serverSlot{paged: true}
		for range n {
			s.pages = append(s.pages, c.srv.bufs.getPage())
		}
		free := len(c.srv.bufs.pages)
		c.dropPayload(s)
		if got := len(c.srv.bufs.pages) - free; got != n {
			t.Errorf("%d pages: %d went back to the free pages", n, got)
		}
		if len(s.pages) != 0 || s.paged {
			t.Errorf("%d pages: the slot still has %d, paged %v", n, len(s.pages), s.paged)
		}
		if kept := cap(s.pages) > 0; kept != (n <= serverKeptPages) {
			t.Errorf("%d pages: list of capacity %d kept", n, cap(s.pages))
		}
	}
}
