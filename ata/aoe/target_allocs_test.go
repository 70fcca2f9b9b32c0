package aoe

import (
	"errors"
	"testing"

	"github.com/nhdkit/nhd/internal/allocs"
)

// sink is a Transport that keeps a copy of the last frame written, in a
// buffer it owns, so that writing allocates nothing.
type sink struct {
	last []byte
	buf  [9014]byte
}

func (s *sink) ReadFrame([]byte) (int, error) { return 0, errors.New("sink: no frames") }
func (s *sink) WriteFrame(b []byte) error {
	s.last = s.buf[:copy(s.buf[:], b)]
	return nil
}
func (s *sink) MAC() MAC     { return targetMAC }
func (s *sink) MTU() int     { return 1500 }
func (s *sink) Close() error { return nil }

// ataPath sets up a target with one ATA host, without a transport loop,
// and returns a function that dispatches frame, which runs it on the
// calling goroutine as the reading goroutine would, for counting
// allocations and benchmarking the ATA path.
func ataPath(tb testing.TB, frame []byte) func() int {
	mem := &memBackend{data: make([]byte, testSectors*512)}
	d, err := NewDisk(0, 1, testInfo(), mem, 1)
	if err != nil {
		tb.Fatal(err)
	}
	out := &sink{}
	tg := &Target{Transport: out, Disks: []*Disk{d}}
	if err := tg.init(); err != nil {
		tb.Fatal(err)
	}
	r := tg.b.reqs[0]
	r.buf = append(r.buf[:0], frame...)
	return func() int {
		out.last = nil
		if tg.handle(r) {
			tb.Fatal("request queued, want it run at once")
		}
		tg.flush()
		var a ATAArg
		if ParseATAArg(out.last, &a); a.CmdStatus != 0x50 {
			tb.Fatalf("status %#x error %#x", a.CmdStatus, a.ErrFeature)
		}
		return len(out.last)
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
		if nallocs := allocs.PerRun(1000, func() { run() }); nallocs > allocs.Slack {
			t.Errorf("%s: %v allocations per request", name, nallocs)
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
