package aoe

import (
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/nhdkit/nhd/internal/allocs"
)

// sink is a Transport that keeps a copy of the last frame written, in a
// buffer it owns, so that writing allocates nothing. If written is not
// nil, each write is announced on it.
type sink struct {
	last    []byte
	buf     [9014]byte
	written chan struct{}
}

func (s *sink) ReadFrame([]byte) (int, error) { return 0, errors.New("sink: no frames") }
func (s *sink) WriteFrame(b []byte) error {
	s.last = s.buf[:copy(s.buf[:], b)]
	if s.written != nil {
		s.written <- struct{}{}
	}
	return nil
}
func (s *sink) MAC() MAC     { return targetMAC }
func (s *sink) MTU() int     { return 1500 }
func (s *sink) Close() error { return nil }

// sinkTarget sets up a target of one disk with hosts ATA hosts over a
// sink, without a transport loop.
func sinkTarget(tb testing.TB, hosts int) (*Target, *sink, *Disk) {
	mem := &memBackend{data: make([]byte, testSectors*512)}
	d, err := NewDisk(0, 1, testInfo(), mem, hosts)
	if err != nil {
		tb.Fatal(err)
	}
	out := &sink{}
	tg := &Target{Transport: out, Disks: []*Disk{d}}
	if err := tg.init(); err != nil {
		tb.Fatal(err)
	}
	return tg, out, d
}

// dispatcher sets up a target with one ATA host and returns a function
// that dispatches frame, which runs it on the calling goroutine as the
// reading goroutine would, and the sink that keeps the last reply; for
// counting allocations and benchmarking.
func dispatcher(tb testing.TB, frame []byte) (func(), *sink, *Disk) {
	tg, out, d := sinkTarget(tb, 1)
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

// requestFrame is a request of cmd to e0.1 with tag 9 and argument arg.
func requestFrame(cmd Command, ver uint8, arg []byte) []byte {
	b := make([]byte, HeaderSize)
	(&Header{Dst: targetMAC, Src: initiatorMAC, Version: ver, Minor: 1, Command: cmd, Tag: 9}).Put(b)
	return append(b, arg...)
}

// Failed ATA requests allocate nothing: those the Target refuses with an
// AoE error (or answers ABRT itself, or with a host-side error), and those
// the device ends in error, whose ata.Error is the goroutine's own
// (Host.ExecErr). Before, a device-ended error cost 2 allocations, then 1
// (its ata.Error), and an AoE error reply 1 (a frame on the stack,
// escaping through the Transport).
func TestATAErrorPathAllocs(t *testing.T) {
	for _, tc := range []struct {
		name     string
		frame    []byte
		reserved bool
		want     string // the reply's bytes 14..33: AoE header, then the ATA flags, error, count, status, LBA
	}{
		{"IDNF", requestFrame(CmdATA, 1, ataReq(ATAExtended, 0x24, 1, testSectors, nil)), false, "18000000010000000009 40140141 000800000000"},
		{"IDNF crossing the end", requestFrame(CmdATA, 1, ataReq(ATAExtended, 0x24, 2, testSectors-1, nil)), false, "18000000010000000009 40140241 000800000000"},
		{"device ABRT (NOP)", requestFrame(CmdATA, 1, ataReq(0, 0x00, 0, 0, nil)), false, "18000000010000000009 00040041 000000000000"},
		{"more sectors than a frame", requestFrame(CmdATA, 1, ataReq(ATAExtended, 0x24, 3, 0, nil)), false, "18000000010000000009 40040341 000000000000"},
		{"reserved", requestFrame(CmdATA, 1, ataReq(ATAExtended, 0x24, 1, 0, nil)), true, "1c060000010000000009 00000000 000000000000"},
		{"short ATA argument", requestFrame(CmdATA, 1, nil)[:HeaderSize], false, "1c020000010000000009 00000000 000000000000"},
		{"version 2", requestFrame(CmdATA, 2, ataReq(ATAExtended, 0x24, 1, 0, nil)), false, "1c050000010000000009 00000000 000000000000"},
		{"unknown command", requestFrame(Command(9), 1, nil), false, "1c010000010900000009 00000000 000000000000"},
	} {
		run, out, d := dispatcher(t, tc.frame)
		if tc.reserved {
			d.reserve = []MAC{targetMAC}
		}
		n := allocs.PerRun(1000, run)
		if got := hex.EncodeToString(out.last[14:34]); got != strings.ReplaceAll(tc.want, " ", "") {
			t.Errorf("%s: reply %s, want %s", tc.name, got, tc.want)
		}
		if n > allocs.Slack {
			t.Errorf("%s: %v allocations per request, want 0", tc.name, n)
		}
	}
}

// workerDispatcher sets up a target with two ATA hosts, whose requests
// run on worker goroutines, starts the worker of the first host only (so
// the replies come one at a time) and returns a function that dispatches
// frame and waits for its reply, and the sink that keeps the reply.
func workerDispatcher(tb testing.TB, frame []byte) (func(), *sink) {
	tg, out, d := sinkTarget(tb, 2)
	out.written = make(chan struct{})
	d.queue = make(chan *request, d.bufferCount())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tg.work(d, d.Hosts[0])
	}()
	tb.Cleanup(func() {
		close(d.queue)
		<-done
	})
	return func() {
		r := <-tg.free
		r.buf = append(r.buf[:0], frame...)
		if !tg.handle(r) {
			tb.Fatal("request run at once, want it queued")
		}
		<-out.written
	}, out
}

// On a disk with several hosts the ATA requests run on the workers, each
// with its own reply frame and ata.Error: a read, and a request the
// device ends in error, allocate nothing there either. Before, the error
// cost its ata.Error.
func TestATAWorkerAllocs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		frame []byte
		want  string // the reply's bytes 14..33, as in TestATAErrorPathAllocs
	}{
		{"read", ataFrame(ATAExtended, 0x24, nil), "18000000010000000009 40000050 280000000000"},
		{"IDNF crossing the end", requestFrame(CmdATA, 1, ataReq(ATAExtended, 0x24, 2, testSectors-1, nil)), "18000000010000000009 40140241 000800000000"},
		{"device ABRT (NOP)", requestFrame(CmdATA, 1, ataReq(0, 0x00, 0, 0, nil)), "18000000010000000009 00040041 000000000000"},
	} {
		run, out := workerDispatcher(t, tc.frame)
		n := allocs.PerRun(1000, run)
		if got := hex.EncodeToString(out.last[14:34]); got != strings.ReplaceAll(tc.want, " ", "") {
			t.Errorf("%s: reply %s, want %s", tc.name, got, tc.want)
		}
		if n > allocs.Slack {
			t.Errorf("%s: %v allocations per request, want 0", tc.name, n)
		}
	}
}
