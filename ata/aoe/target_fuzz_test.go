package aoe

import (
	"testing"
)

// FuzzTarget hands arbitrary frames to a target's dispatcher and runs any
// ATA command it queues, on the reading goroutine: nothing may panic, and
// every frame the target sends must be a well-formed reply to the request
// (R set, the request's tag, the target's own address, at least 60 bytes).
func FuzzTarget(f *testing.F) {
	f.Fuzz(func(t *testing.T, frame []byte) {
		mem := &memBackend{data: make([]byte, 64*512)}
		info := testInfo()
		info.Sectors = 64
		d, err := NewDisk(0, 1, info, mem, 1)
		if err != nil {
			t.Fatal(err)
		}
		p := newPipe(1500)
		tg := &Target{Transport: p, Disks: []*Disk{d}}
		if err := tg.init(); err != nil {
			t.Fatal(err)
		}
		d.queue = make(chan *request, 1)
		r := &request{buf: append(<-tg.free, frame...)}
		if len(r.buf) > tg.frameSize {
			r.buf = r.buf[:tg.frameSize]
		}
		if tg.handle(r) {
			q := <-d.queue
			q.h.Reply(tg.mac, d.Shelf, d.Slot)
			reply := make([]byte, tg.frameSize)
			n := execATA(d.Hosts[0], q.buf, &q.h, &q.a, reply, tg.maxSectors)
			p.WriteFrame(reply[:n])
		}
		close(p.out)
		var req Header
		for out := range p.out {
			var h Header
			if ParseHeader(frame, &req) != nil || ParseHeader(out, &h) != nil {
				t.Fatalf("reply %x to a frame that does not parse", out)
			}
			if !h.Flags.Has(FlagResponse) || h.Tag != req.Tag || h.Major != 0 || h.Minor != 1 || h.Src != targetMAC || h.Dst != req.Src || len(out) < MinFrameSize {
				t.Fatalf("reply %+v (%d bytes) to %+v", h, len(out), req)
			}
		}
	})
}
