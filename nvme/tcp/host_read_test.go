package tcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"unsafe"

	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nvme"
)

// pipeQueue returns a host queue of depth n reading and writing nc, its
// reader started, as dialQueue makes one after Connect.
func pipeQueue(nc net.Conn, f framing, n int) *hostQueue {
	q := &hostQueue{nc: nc, dead: make(chan struct{}), rdone: make(chan struct{}), maxH2C: 4096, f: f}
	q.r = newHostPDUReader(nc)
	q.r.framing = f
	q.slots = make([]hslot, n)
	q.free = make(chan uint16, n)
	for i := range q.slots {
		q.slots[i].done = make(chan struct{}, 1)
		q.free <- uint16(i)
	}
	for i := range q.pend {
		q.pend[i] = make([][]byte, 0, 4*n+16)
	}
	go q.reader()
	return q
}

// spyConn counts the bytes its Reads put into dst and elsewhere (the
// pduReader's buffer). It has no descriptor, so the host reads it with
// plain Reads.
type spyConn struct {
	net.Conn
	dst              []byte
	direct, buffered int
}

func (c *spyConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	lo, hi := uintptr(unsafe.Pointer(&c.dst[0])), uintptr(unsafe.Pointer(&c.dst[len(c.dst)-1]))
	if at := uintptr(unsafe.Pointer(&p[0])); at >= lo && at <= hi {
		c.direct += n
	} else {
		c.buffered += n
	}
	return n, err
}

// scriptTarget answers each command read from nc with its data in one
// C2HData of len(data) bytes and a CapsuleResp, all in one Write; the data
// digest is wrong where bad says so.
func scriptTarget(nc net.Conn, f framing, data []byte, bad func(i int) bool) error {
	cmd := make([]byte, CmdSize+DigestSize)
	for i := 0; ; i++ {
		if _, err := io.ReadFull(nc, cmd[:f.layout(TypeCapsuleCmd, 0).PLen]); err != nil {
			return err
		}
		var c CapsuleCmd
		if err := c.Parse((*[CmdSize]byte)(cmd[:CmdSize])); err != nil {
			return err
		}
		var out []byte
		var hb [HeaderSize + DigestSize]byte
		d := Data{Header: f.layout(TypeC2HData, len(data)), CCCID: c.Cmd.CID, DataL: uint32(len(data))}
		d.Flags |= FlagLast
		d.Put((*[HeaderSize]byte)(hb[:HeaderSize]))
		out = append(append(out, f.sealHeader(hb[:], HeaderSize)...), data...)
		if f.ddgst {
			var dg [DigestSize]byte
			putDigest(&dg, data)
			if bad(i) {
				dg[0]++
			}
			out = append(out, dg[:]...)
		}
		r := CapsuleResp{Header: f.layout(TypeCapsuleResp, 0), Cpl: nvme.Completion{CID: c.Cmd.CID}}
		r.Put((*[HeaderSize]byte)(hb[:HeaderSize]))
		out = append(out, f.sealHeader(hb[:], HeaderSize)...)
		if _, err := nc.Write(out); err != nil {
			return err
		}
	}
}

// A 64 KiB C2HData payload goes from the connection straight into the
// caller's buffer, whichever digests: after the first read, the reads
// into the pduReader's buffer carry the headers and digests around each
// payload and at most a few bytes of it (two fills of hostAhead bytes),
// even though the target writes each PDU in one Write that a buffered
// read would take whole. A wrong data digest on a direct payload fails
// that command only.
func TestHostReadDirect(t *testing.T) {
	const n, reads = 64 << 10, 8
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(i*7 + i>>8)
	}
	for dg := range uint8(4) {
		t.Run(fmt.Sprintf("digests=%d", dg), func(t *testing.T) {
			f := framing{hdgst: dg&1 != 0, ddgst: dg&2 != 0}
			host, target := net.Pipe()
			buf := make([]byte, n)
			spy := &spyConn{Conn: host, dst: buf}
			q := pipeQueue(spy, f, 4)
			defer q.close()
			bad := func(i int) bool { return i == reads-1 }
			go scriptTarget(target, f, data, bad)
			var buffered, direct int
			for i := range reads {
				clear(buf)
				cmd := nvme.Command{Opcode: nvme.OpRead, NSID: 1}
				cmd.SetRange(0, n/512)
				cpl, err := q.do(context.Background(), &cmd, buf, nil)
				if f.ddgst && bad(i) {
					if !errors.Is(err, ErrDataDigest) {
						t.Fatalf("read %d with a wrong data digest: %v, want ErrDataDigest", i, err)
					}
					continue
				}
				if err != nil || cpl.Err() != nil {
					t.Fatalf("read %d: %v, %v", i, err, cpl.Err())
				}
				if !bytes.Equal(buf, data) {
					t.Fatalf("read %d: wrong data", i)
				}
				if i == 0 { // the first fill of the buffer is a whole one
					buffered, direct = spy.buffered, spy.direct
				}
			}
			buffered, direct = spy.buffered-buffered, spy.direct-direct
			if limit := (reads - 1) * 2 * hostAhead; buffered > limit {
				t.Errorf("%d reads of 64 KiB put %d bytes through the pduReader's buffer, want at most %d", reads-1, buffered, limit)
			}
			if least := (reads - 1) * (n - hostAhead); direct < least {
				t.Errorf("%d reads of 64 KiB read %d bytes straight into the caller's buffer, want at least %d", reads-1, direct, least)
			}
		})
	}
}

// On loopback TCP (raw reads and readv on Linux), 64 KiB reads from this
// package's target, one at a time and eight at once, all go straight
// into the callers' buffers, every byte checked.
func TestHostReadDirectLoopback(t *testing.T) {
	const n, reads = 64 << 10, 32
	disk := nbd.NewMemDisk(reads * n)
	want := make([]byte, reads*n)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range want {
		want[i] = byte(rng.Uint32())
	}
	if _, err := disk.WriteAt(want, 0); err != nil {
		t.Fatal(err)
	}
	_, addr := startServer(t, disk, 512)
	for _, dg := range []bool{false, true} {
		t.Run(fmt.Sprintf("digests=%v", dg), func(t *testing.T) {
			h := dialTest(t, addr, &Config{IOQueues: 1, KeepAlive: -1, HeaderDigest: dg, DataDigest: dg})
			s := h.io[0].r.direct.(*hostSock)
			buf := make([]byte, n)
			h.ReadAt(buf, 0) // warm up: the first fill is a whole one
			buffered, direct := s.buffered.Load(), s.direct.Load()
			for i := range reads {
				if _, err := h.ReadAt(buf, int64(i*n)); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(buf, want[i*n:][:n]) {
					t.Fatalf("read %d: wrong data", i)
				}
			}
			buffered, direct = s.buffered.Load()-buffered, s.direct.Load()-direct
			if limit := int64(reads * 2 * hostAhead); buffered > limit {
				t.Errorf("%d reads of 64 KiB put %d bytes through the pduReader's buffer, want at most %d", reads, buffered, limit)
			}
			if least := int64(reads * (n - hostAhead)); direct < least {
				t.Errorf("%d reads of 64 KiB read %d bytes straight into the caller's buffer, want at least %d", reads, direct, least)
			}
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for g := range 8 {
				wg.Go(func() {
					b := make([]byte, n)
					for i := g; i < reads; i += 8 {
						if _, err := h.ReadAt(b, int64(i*n)); err != nil {
							errs <- err
							return
						}
						if !bytes.Equal(b, want[i*n:][:n]) {
							errs <- fmt.Errorf("read %d at depth: wrong data", i)
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
		})
	}
}

// After a direct payload the host's reads of the socket stay cut to a
// few headers through the PDU without data that follows it (the read's
// CapsuleResp), and end with the next one (a stream of completions of
// writes, which one large read takes whole) or with a small payload.
func TestHostReadPace(t *testing.T) {
	host, target := net.Pipe()
	defer host.Close()
	r := newHostPDUReader(host)
	s := r.direct.(*hostSock)
	var f framing
	pdu := func(t PDUType, n int) []byte {
		b := make([]byte, HeaderSize, HeaderSize+n)
		switch t {
		case TypeC2HData:
			(&Data{Header: f.layout(t, n), DataL: uint32(n)}).Put((*[HeaderSize]byte)(b))
		default:
			(&CapsuleResp{Header: f.layout(t, 0)}).Put((*[HeaderSize]byte)(b))
		}
		return append(b, make([]byte, n)...)
	}
	go func() {
		for _, p := range [][]byte{pdu(TypeC2HData, 64<<10), pdu(TypeCapsuleResp, 0), pdu(TypeCapsuleResp, 0),
			pdu(TypeC2HData, 64<<10), pdu(TypeC2HData, 4096)} {
			target.Write(p)
		}
		target.Close()
	}()
	buf := make([]byte, 64<<10)
	step := func(what string, data []byte, cut bool) {
		t.Helper()
		if err := r.next(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if data != nil {
			if err := r.readPayload(data); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
		if s.cut != cut {
			t.Errorf("after %s: reads cut %v, want %v", what, s.cut, cut)
		}
	}
	step("a 64 KiB C2HData", buf, true)
	step("its CapsuleResp", nil, true)
	step("a second CapsuleResp", nil, false)
	step("another 64 KiB C2HData", buf, true)
	step("a 4 KiB C2HData", buf[:4096], false)
}
