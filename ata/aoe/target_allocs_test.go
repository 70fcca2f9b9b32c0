package aoe

import (
	"encoding/hex"
	"errors"
	"strings"
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

// dispatcher sets up a target with one ATA host, without a transport
// loop, and returns a function that dispatches frame, which runs it on the
// calling goroutine as the reading goroutine would, and the sink that
// keeps the last reply; for counting allocations and benchmarking.
func dispatcher(tb testing.TB, frame []byte) (func(), *sink, *Disk) {
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
	return func() {
		out.last = nil
		if tg.handle(r) {
			tb.Fatal("request queued, want it run at once")
		}
		tg.flush()
	}, out, d
}

// ataPath is dispatcher for a frame whose ATA command must succeed; its
// function returns the reply's length.
func ataPath(tb testing.TB, frame []byte) func() int {
	run, out, _ := dispatcher(tb, frame)
	return func() int {
		run()
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

// Failed ATA requests: those the Target refuses with an AoE error (or
// answers ABRT itself, or with a host-side error) allocate nothing; one
// the device ends in error allocates once, its ata.Error (Target's doc).
// Before, a device-ended error cost 2 allocations and an AoE error reply
// 1 (a frame on the stack, escaping through the Transport).
func TestATAErrorPathAllocs(t *testing.T) {
	req := func(cmd Command, ver uint8, arg []byte) []byte {
		b := make([]byte, HeaderSize)
		(&Header{Dst: targetMAC, Src: initiatorMAC, Version: ver, Minor: 1, Command: cmd, Tag: 9}).Put(b)
		return append(b, arg...)
	}
	for _, tc := range []struct {
		name     string
		frame    []byte
		reserved bool
		want     string // the reply's bytes 14..27: AoE header, then the ATA flags, error, count, status
		allocs   float64
	}{
		{"IDNF", req(CmdATA, 1, ataReq(ATAExtended, 0x24, 1, testSectors, nil)), false, "18000000010000000009 40140141", 1},
		{"device ABRT (NOP)", req(CmdATA, 1, ataReq(0, 0x00, 0, 0, nil)), false, "18000000010000000009 00040041", 1},
		{"more sectors than a frame", req(CmdATA, 1, ataReq(ATAExtended, 0x24, 3, 0, nil)), false, "18000000010000000009 40040341", 0},
		{"reserved", req(CmdATA, 1, ataReq(ATAExtended, 0x24, 1, 0, nil)), true, "1c060000010000000009 00000000", 0},
		{"short ATA argument", req(CmdATA, 1, nil)[:HeaderSize], false, "1c020000010000000009 00000000", 0},
		{"version 2", req(CmdATA, 2, ataReq(ATAExtended, 0x24, 1, 0, nil)), false, "1c050000010000000009 00000000", 0},
		{"unknown command", req(Command(9), 1, nil), false, "1c010000010900000009 00000000", 0},
	} {
		run, out, d := dispatcher(t, tc.frame)
		if tc.reserved {
			d.reserve = []MAC{targetMAC}
		}
		n := allocs.PerRun(1000, run)
		if got := hex.EncodeToString(out.last[14:28]); got != strings.ReplaceAll(tc.want, " ", "") {
			t.Errorf("%s: reply %s, want %s", tc.name, got, tc.want)
		}
		if n > tc.allocs+allocs.Slack {
			t.Errorf("%s: %v allocations per request, want %v", tc.name, n, tc.allocs)
		}
	}
}
