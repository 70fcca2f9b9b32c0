package tcp

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nvme"
)

// pduProxy passes PDUs between hosts and a target, PDU by PDU: it notes
// the Connect commands hosts send and counts the PDUs of each type the
// target sends. With refuse set, it answers a Connect asking for SQ flow
// control off itself, with that status, as a controller that does not
// offer it would (digests must be off then).
type pduProxy struct {
	target string

	mu       sync.Mutex
	refuse   nvme.Status
	connects []nvme.Connect
	sent     map[PDUType]int
}

// setRefuse makes p answer the next Connects asking for SQ flow control
// off with st (0: pass them on).
func (p *pduProxy) setRefuse(st nvme.Status) {
	p.mu.Lock()
	p.refuse = st
	p.mu.Unlock()
}

func startProxy(t *testing.T, target string, refuse nvme.Status) (*pduProxy, string) {
	p := &pduProxy{target: target, refuse: refuse, sent: map[PDUType]int{}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			hc, err := l.Accept()
			if err != nil {
				return
			}
			tc, err := net.Dial("tcp", target)
			if err != nil {
				hc.Close()
				continue
			}
			t.Cleanup(func() { hc.Close(); tc.Close() })
			var hmu sync.Mutex // orders writes to the host
			go p.fromHost(hc, tc, &hmu)
			go p.fromTarget(tc, hc, &hmu)
		}
	}()
	return p, l.Addr().String()
}

// readPDU reads one whole PDU.
func readPDU(r io.Reader) ([]byte, error) {
	var ch [CommonSize]byte
	if _, err := io.ReadFull(r, ch[:]); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(ch[4:])
	if n < CommonSize || n > 64<<20 {
		return nil, io.ErrUnexpectedEOF
	}
	b := make([]byte, n)
	copy(b, ch[:])
	_, err := io.ReadFull(r, b[CommonSize:])
	return b, err
}

func (p *pduProxy) fromHost(hc, tc net.Conn, hmu *sync.Mutex) {
	defer tc.Close()
	for {
		b, err := readPDU(hc)
		if err != nil {
			return
		}
		if PDUType(b[0]) == TypeCapsuleCmd && len(b) >= CmdSize {
			var c CapsuleCmd
			c.Parse((*[CmdSize]byte)(b[:CmdSize]))
			if c.Cmd.Opcode == nvme.OpFabrics && c.Cmd.NSID == uint32(nvme.FabricsConnect) {
				k := nvme.ConnectOf(&c.Cmd)
				p.mu.Lock()
				p.connects = append(p.connects, k)
				refuse := p.refuse
				p.mu.Unlock()
				if refuse != 0 && k.CATTR&nvme.CATTRNoSQFlow != 0 {
					var r [HeaderSize]byte
					(&CapsuleResp{Header: framing{}.layout(TypeCapsuleResp, 0), Cpl: nvme.Completion{CID: c.Cmd.CID, Status: p.refuse}}).Put(&r)
					hmu.Lock()
					hc.Write(r[:])
					hmu.Unlock()
					continue
				}
			}
		}
		if _, err := tc.Write(b); err != nil {
			return
		}
	}
}

func (p *pduProxy) fromTarget(tc, hc net.Conn, hmu *sync.Mutex) {
	defer hc.Close()
	for {
		b, err := readPDU(tc)
		if err != nil {
			return
		}
		p.mu.Lock()
		p.sent[PDUType(b[0])]++
		p.mu.Unlock()
		hmu.Lock()
		_, err = hc.Write(b)
		hmu.Unlock()
		if err != nil {
			return
		}
	}
}

func (p *pduProxy) count(t PDUType) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent[t]
}

// The host asks for SQ flow control off on its I/O queues (not on the
// admin queue); this package's target then ends each successful read
// with the C2HData SUCCESS flag and sends no CapsuleResp for it, and the
// host completes the read on that flag. A controller that refuses the
// Connect gets it again with SQ flow control on, and each read then ends
// with a CapsuleResp.
func TestHostNoSQFlow(t *testing.T) {
	const n, reads = 64 << 10, 16
	disk := nbd.NewMemDisk(reads * n)
	want := bytes.Repeat([]byte("nvme/tcp SUCCESS"), reads*n/16)
	disk.WriteAt(want, 0)
	_, addr := startServer(t, disk, 512)
	for _, tc := range []struct {
		name   string
		refuse nvme.Status
		dg     bool
	}{
		{"accepted", 0, false},
		{"accepted/digests", 0, true},
		{"refused/invalid-param", nvme.StatusConnectInvalidParam | nvme.StatusDNR, false},
		{"refused/invalid-field", nvme.StatusInvalidField | nvme.StatusDNR, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, paddr := startProxy(t, addr, tc.refuse)
			h := dialTest(t, paddr, &Config{IOQueues: 2, KeepAlive: -1, HeaderDigest: tc.dg, DataDigest: tc.dg})
			buf := make([]byte, n)
			data, resps := p.count(TypeC2HData), p.count(TypeCapsuleResp)
			for i := range reads {
				if _, err := h.ReadAt(buf, int64(i*n)); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(buf, want[i*n:][:n]) {
					t.Fatalf("read %d: wrong data", i)
				}
			}
			data, resps = p.count(TypeC2HData)-data, p.count(TypeCapsuleResp)-resps
			wantResps := 0
			if tc.refuse != 0 {
				wantResps = reads
			}
			if data != reads || resps != wantResps {
				t.Errorf("%d reads: the target sent %d C2HData and %d CapsuleResp, want %d and %d", reads, data, resps, reads, wantResps)
			}
			p.mu.Lock()
			defer p.mu.Unlock()
			ioq := 0
			for _, k := range p.connects {
				off := k.CATTR&nvme.CATTRNoSQFlow != 0
				switch {
				case k.QID == 0 && off:
					t.Errorf("admin queue Connect asked for SQ flow control off")
				case k.QID != 0 && off:
					ioq++
				}
			}
			if ioq != 2 {
				t.Errorf("%d I/O queue Connects asked for SQ flow control off, want 2 (one per queue): %+v", ioq, p.connects)
			}
			if want := 3 + 2*min(int(tc.refuse), 1); len(p.connects) != want {
				t.Errorf("%d Connects, want %d: %+v", len(p.connects), want, p.connects)
			}
		})
	}
}
