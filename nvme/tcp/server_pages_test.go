package tcp

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nvme"
)

// pickyDisk is a MemDisk that takes only the pages of even page numbers
// (and counts them), and fails every write at bad.
type pickyDisk struct {
	*nbd.MemDisk
	taken atomic.Int64
	bad   atomic.Int64 // a page's offset, or -1
}

func (d *pickyDisk) TakePage(p *[nbd.PageSize]byte, off int64) (*[nbd.PageSize]byte, bool) {
	if off/nbd.PageSize%2 == 1 {
		return nil, false
	}
	d.taken.Add(1)
	return d.MemDisk.TakePage(p, off)
}

func (d *pickyDisk) WriteAt(p []byte, off int64) (int, error) {
	if bad := d.bad.Load(); bad >= 0 && off <= bad && bad < off+int64(len(p)) {
		return 0, syscall.EIO
	}
	return d.MemDisk.WriteAt(p, off)
}

// Writes of several whole, aligned pages go to a PageTaker a page at a
// time, with the data in the capsule and fetched by R2T, digests off and
// on; writes that are not whole pages go through WriteAt; every byte reads
// back as written.
func TestServerMultiPageWrites(t *testing.T) {
	const size = 4 << 20
	for _, r2t := range []bool{false, true} {
		for _, dg := range []bool{false, true} {
			t.Run(fmt.Sprintf("R2T %v, digests %v", r2t, dg), func(t *testing.T) {
				disk := &countingDisk{MemDisk: nbd.NewMemDisk(size)}
				_, addr := startServer(t, disk, 512, func(s *Server) {
					if r2t {
						s.Fabric.InCapsuleSize = 4096
					}
				})
				h := dialTest(t, addr, &Config{IOQueues: 1, QueueDepth: 8, HeaderDigest: dg, DataDigest: dg})
				model := make([]byte, size)
				r := rand.New(rand.NewPCG(1, 2))
				pages := int64(0)
				for _, w := range []struct{ n, off, pages int }{
					{2 * nbd.PageSize, 0, 2},
					{4 * nbd.PageSize, 8 * nbd.PageSize, 4}, // split by the host at its largest transfer
					{2 * nbd.PageSize, 512, 0},              // not aligned: copied
					{2*nbd.PageSize + 4096, 20 * nbd.PageSize, 2},
					{2 * nbd.PageSize, 0, 2}, // again: the pages given back are used
				} {
					buf := make([]byte, w.n)
					for i := range buf {
						buf[i] = byte(r.Uint32())
					}
					before := disk.pages.Load()
					if _, err := h.WriteAt(buf, int64(w.off)); err != nil {
						t.Fatalf("write %d at %d: %v", w.n, w.off, err)
					}
					copy(model[w.off:], buf)
					pages += int64(w.pages)
					if got := disk.pages.Load() - before; got != int64(w.pages) {
						t.Errorf("write %d at %d: %d pages taken, want %d", w.n, w.off, got, w.pages)
					}
				}
				got := make([]byte, size)
				if _, err := h.ReadAt(got, 0); err != nil || !bytes.Equal(got, model) {
					t.Fatalf("read back differs (%v)", err)
				}
				if _, err := disk.MemDisk.ReadAt(got, 0); err != nil || !bytes.Equal(got, model) {
					t.Fatalf("backend differs (%v)", err)
				}
				if disk.pages.Load() != pages {
					t.Errorf("%d pages taken, want %d", disk.pages.Load(), pages)
				}
			})
		}
	}
}

// A PageTaker that refuses some pages of a multi-page write has them
// written with WriteAt; a WriteAt that fails fails the command with its
// status, and the connection goes on.
func TestServerMultiPageRefused(t *testing.T) {
	const size = 1 << 20
	disk := &pickyDisk{MemDisk: nbd.NewMemDisk(size)}
	disk.bad.Store(-1)
	_, addr := startServer(t, disk, 512)
	h := dialTest(t, addr, &Config{IOQueues: 1, QueueDepth: 4})
	buf := make([]byte, 2*nbd.PageSize)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	if _, err := h.WriteAt(buf, 2*nbd.PageSize); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(buf))
	if _, err := h.ReadAt(got, 2*nbd.PageSize); err != nil || !bytes.Equal(got, buf) {
		t.Fatalf("read back differs (%v)", err)
	}
	if n := disk.taken.Load(); n != 1 {
		t.Errorf("%d pages taken of a write of one even and one odd page", n)
	}
	disk.bad.Store(5 * nbd.PageSize)
	if _, err := h.WriteAt(buf, 4*nbd.PageSize); !errors.Is(err, syscall.EIO) {
		t.Fatalf("write over a failing page: %v, want EIO", err)
	}
	disk.bad.Store(-1)
	if _, err := h.WriteAt(buf, 4*nbd.PageSize); err != nil {
		t.Fatalf("the write after the failed one: %v", err)
	}
}

// A multi-page write whose data comes in H2CData PDUs cut anywhere,
// across the pages' boundary, with digests: the pages get every byte in
// place and go to the PageTaker.
func TestServerMultiPageH2CPieces(t *testing.T) {
	disk := &countingDisk{MemDisk: nbd.NewMemDisk(1 << 20)}
	_, addr := startServer(t, disk, 512, func(s *Server) { s.Fabric.InCapsuleSize = 4096 })
	const dg = DigestHeader | DigestData
	a := dialRaw(t, addr)
	a.icreq(dg)
	cntlid := uint16(a.connect(0, nvme.DynamicControllerID))
	var cmd nvme.Command
	nvme.Property{Set: true, Offset: nvme.PropCC, Value: uint64(nvme.CCEnable)}.Encode(&cmd)
	a.capsule(cmd, nil)
	if cpl := a.resp(); cpl.Status != 0 {
		t.Fatal(cpl.Status)
	}
	a.capsule(nvme.Command{Opcode: nvme.OpSetFeatures, CDW10: nvme.FeatNumberOfQueues, CDW11: nvme.NumberOfQueues(1, 1)}, nil)
	if cpl := a.resp(); cpl.Status != 0 {
		t.Fatal(cpl.Status)
	}
	q := dialRaw(t, addr)
	q.icreq(dg)
	q.connect(1, cntlid)

	data := make([]byte, 2*nbd.PageSize)
	for i := range data {
		data[i] = byte(i*13 + i>>9)
	}
	const off = 2 * nbd.PageSize
	cmd = nvme.Command{Opcode: nvme.OpWrite, CID: 9, NSID: 1, CDW10: off / 512, CDW12: uint32(len(data)/512 - 1),
		SGL: nvme.SGL{Type: nvme.SGLTransportDataBlock, Length: uint32(len(data))}}
	q.capsule(cmd, nil)
	hd, hdr, _ := q.pdu()
	var r2t R2T
	if err := r2t.Parse((*[HeaderSize]byte)(hdr)); err != nil || hd.Type != TypeR2T || int(r2t.R2TL) != len(data) {
		t.Fatalf("got %v (%v), want an R2T for the whole write", hd.Type, err)
	}
	cuts := []int{0, 1000, nbd.PageSize - 7, 70000, len(data)}
	for k := 0; k+1 < len(cuts); k++ {
		piece := data[cuts[k]:cuts[k+1]]
		p := Data{Header: q.f.layout(TypeH2CData, len(piece)), CCCID: r2t.CCCID, TTag: r2t.TTag, DataO: uint32(cuts[k]), DataL: uint32(len(piece))}
		if k+2 == len(cuts) {
			p.Flags |= FlagLast
		}
		var b [HeaderSize + DigestSize]byte
		p.Put((*[HeaderSize]byte)(b[:HeaderSize]))
		var d [DigestSize]byte
		putDigest(&d, piece)
		q.write(q.f.sealHeader(b[:], HeaderSize), piece, d[:])
	}
	if cpl := q.resp(); cpl.Status != 0 || cpl.CID != 9 {
		t.Fatalf("write: %+v", cpl)
	}
	got := make([]byte, len(data))
	if _, err := disk.MemDisk.ReadAt(got, off); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("backend differs (%v)", err)
	}
	if n := disk.pages.Load(); n != 2 {
		t.Errorf("%d pages taken, want 2", n)
	}
}
