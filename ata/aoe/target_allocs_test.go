package aoe

import (
	"testing"
)

// ataPath sets up a target without a transport loop and returns a
// function that dispatches frame and runs it as a worker would, for
// counting allocations and benchmarking the ATA path.
func ataPath(tb testing.TB, frame []byte) func() int {
	mem := &memBackend{data: make([]byte, testSectors*512)}
	d, err := NewDisk(0, 1, testInfo(), mem, 1)
	if err != nil {
		tb.Fatal(err)
	}
	tg := &Target{Transport: newPipe(1500), Disks: []*Disk{d}}
	if err := tg.init(); err != nil {
		tb.Fatal(err)
	}
	d.queue = make(chan *request, 1)
	r := <-tg.free
	r.buf = append(r.buf[:0], frame...)
	reply := make([]byte, tg.frameSize)
	return func() int {
		if !tg.handle(r) {
			tb.Fatal("request not queued")
		}
		q := <-d.queue
		q.h.Reply(tg.mac, d.Shelf, d.Slot)
		n := execATA(d.Hosts[0], q.buf, &q.h, &q.a, reply, tg.maxSectors)
		var a ATAArg
		if ParseATAArg(reply[:n], &a); a.CmdStatus != 0x50 {
			tb.Fatalf("status %#x error %#x", a.CmdStatus, a.ErrFeature)
		}
		return n
	}
}

func ataFrame(flags ATAFlags, op uint8, data []byte) []byte {
	b := make([]byte, HeaderSize)
	(&Header{Dst: targetMAC, Src: initiatorMAC, Version: 1, Minor: 1, Tag: 9}).Put(b)
	return append(b, ataReq(flags, op, 2, 40, data)...)
}

// The ATA path of a read and of a write allocates nothing: frames and
// replies live in the target's buffers, the data goes straight between
// them and the backend.
func TestATAPathAllocs(t *testing.T) {
	for name, frame := range map[string][]byte{
		"read":  ataFrame(ATAExtended, 0x24, nil),
		"write": ataFrame(ATAExtended|ATAWrite, 0x34, make([]byte, 1024)),
	} {
		run := ataPath(t, frame)
		if allocs := testing.AllocsPerRun(200, func() { run() }); allocs != 0 {
			t.Errorf("%s: %v allocations per request", name, allocs)
		}
	}
}

// BenchmarkTargetATA measures the target's ATA path for two-sector frames
// (the 1500-byte MTU case), without a transport.
func BenchmarkTargetATA(b *testing.B) {
	for name, frame := range map[string][]byte{
		"read":  ataFrame(ATAExtended, 0x24, nil),
		"write": ataFrame(ATAExtended|ATAWrite, 0x34, make([]byte, 1024)),
	} {
		b.Run(name, func(b *testing.B) {
			run := ataPath(b, frame)
			b.ReportAllocs()
			b.SetBytes(1024)
			for b.Loop() {
				run()
			}
		})
	}
}
