package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/nhdkit/nhd/ata"
	"github.com/nhdkit/nhd/ata/aoe"
)

// result is what one run moved.
type result struct {
	write           bool
	depth, sectors  int
	frames, bytes   int64
	lost            int // frames without a reply when the run ended
	elapsed         time.Duration
	target          aoe.MAC
	targetBufferCnt int
}

func (r result) String() string {
	op := "read"
	if r.write {
		op = "write"
	}
	s := r.elapsed.Seconds()
	return fmt.Sprintf("%s: %.1f MB/s, %.0f frames/s (%d frames of %d sectors, %d in flight; target %v, buffer count %d; %d lost)",
		op, float64(r.bytes)/s/1e6, float64(r.frames)/s, r.frames, r.sectors, r.depth, r.target, r.targetBufferCnt, r.lost)
}

// run asks the target's config, then keeps o.depth frames in flight
// until o.runtime has passed and the replies in flight are in (or
// o.waitReplies has passed: then tr is closed, and what is missing is
// lost). tr is closed when run returns.
func run(tr aoe.Transport, o *options) (result, error) {
	defer tr.Close()
	r := result{write: o.write}
	var err error
	r.target, r.targetBufferCnt, r.sectors, err = queryConfig(tr, o)
	if err != nil {
		return r, err
	}
	r.depth = o.depth
	if r.depth == 0 {
		r.depth = r.targetBufferCnt
	}
	if o.sectors > 0 {
		r.sectors = o.sectors
	}
	span := o.size / 512 / int64(r.sectors) * int64(r.sectors) // whole frames only
	if span == 0 {
		return r, fmt.Errorf("-size %d is less than a frame of %d sectors", o.size, r.sectors)
	}
	f := newFlight(tr, o, r.target, r.depth, r.sectors, span)
	start := time.Now()
	f.deadline = start.Add(o.runtime)
	// The replies still missing when the wait after the deadline ends
	// are lost: closing tr ends the read waiting for them.
	defer closeAfter(tr, o.runtime+o.waitReplies)()
	err = f.fly()
	r.elapsed = time.Since(start)
	r.frames, r.lost = f.done, f.inflight
	r.bytes = f.done * int64(r.sectors) * 512
	return r, err
}

// queryConfig asks (shelf, slot) for its config, by broadcast, and
// returns its MAC, buffer count and the sectors a frame carries: as many
// as both the MTU and the target's sector count allow.
func queryConfig(tr aoe.Transport, o *options) (aoe.MAC, int, int, error) {
	frame := make([]byte, 0, aoe.MinFrameSize)
	h := aoe.Header{Dst: aoe.MAC{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, Src: tr.MAC(), Version: aoe.Version,
		Major: o.shelf, Minor: o.slot, Command: aoe.CmdQueryConfig, Tag: 0x51C0FF}
	frame = frame[:aoe.HeaderSize]
	h.Put(frame)
	frame, _ = (&aoe.ConfigArg{Cmd: aoe.ConfigRead}).Append(frame)
	frame = frame[:aoe.MinFrameSize] // the rest is zero
	stop := closeAfter(tr, 3*time.Second)
	defer stop()
	if err := tr.WriteFrame(frame); err != nil {
		return aoe.MAC{}, 0, 0, err
	}
	buf := make([]byte, 14+tr.MTU())
	for {
		n, err := tr.ReadFrame(buf)
		if err != nil {
			return aoe.MAC{}, 0, 0, fmt.Errorf("no config reply from e%d.%d: %w", o.shelf, o.slot, err)
		}
		var rh aoe.Header
		var c aoe.ConfigArg
		if aoe.ParseHeader(buf[:n], &rh) != nil || !rh.Flags.Has(aoe.FlagResponse) || rh.Command != aoe.CmdQueryConfig ||
			rh.Tag != h.Tag || rh.Major != o.shelf || rh.Minor != o.slot || aoe.ParseConfigArg(buf[:n], &c) != nil {
			continue
		}
		sectors := (tr.MTU() - (aoe.ATADataOffset - 14)) / 512
		if c.SectorCount > 0 {
			sectors = min(sectors, int(c.SectorCount))
		}
		if sectors < 1 || c.BufferCount < 1 {
			return aoe.MAC{}, 0, 0, fmt.Errorf("e%d.%d: buffer count %d, %d sectors per frame", o.shelf, o.slot, c.BufferCount, sectors)
		}
		return rh.Src, int(c.BufferCount), sectors, nil
	}
}

// closeAfter closes tr after d, unless the returned stop comes first.
func closeAfter(tr aoe.Transport, d time.Duration) (stop func()) {
	t := time.AfterFunc(d, func() { tr.Close() })
	return func() { t.Stop() }
}

// flight is the frames in flight: slot k's frame carries tag
// k<<16 | its generation, so a late reply to an earlier frame of the
// slot is told apart.
type flight struct {
	tr       aoe.Transport
	write    bool
	target   aoe.MAC
	shelf    uint16
	slot     uint8
	sectors  int
	span     int64 // sectors gone over, from LBA 0
	next     int64 // the next frame's LBA
	frames   [][]byte
	gen      []uint16
	busy     []bool
	inflight int
	done     int64
	deadline time.Time
}

func newFlight(tr aoe.Transport, o *options, target aoe.MAC, depth, sectors int, span int64) *flight {
	f := &flight{tr: tr, write: o.write, target: target, shelf: o.shelf, slot: o.slot, sectors: sectors, span: span,
		frames: make([][]byte, depth), gen: make([]uint16, depth), busy: make([]bool, depth)}
	n := aoe.ATADataOffset
	if f.write {
		n += sectors * 512
	}
	for k := range f.frames {
		f.frames[k] = make([]byte, max(n, aoe.MinFrameSize))
		for i := aoe.ATADataOffset; i < n; i++ {
			f.frames[k][i] = pattern(i - aoe.ATADataOffset) // what a write stores
		}
	}
	return f
}

// send sends slot k's next frame.
func (f *flight) send(k int) error {
	f.gen[k]++
	h := aoe.Header{Dst: f.target, Src: f.tr.MAC(), Version: aoe.Version, Major: f.shelf, Minor: f.slot,
		Command: aoe.CmdATA, Tag: uint32(k)<<16 | uint32(f.gen[k])}
	a := aoe.ATAArg{Flags: aoe.ATAExtended, SectorCount: uint8(f.sectors), CmdStatus: uint8(ata.CmdReadSectorsExt), LBA: uint64(f.next)}
	if f.write {
		a.Flags |= aoe.ATAWrite
		a.CmdStatus = uint8(ata.CmdWriteSectorsExt)
	}
	h.Put(f.frames[k])
	a.Put(f.frames[k])
	f.next = (f.next + int64(f.sectors)) % f.span
	f.busy[k] = true
	f.inflight++
	return f.tr.WriteFrame(f.frames[k])
}

// fly fills the window, then sends a frame for each reply until the
// deadline, then waits for the replies in flight.
func (f *flight) fly() error {
	for k := range f.frames {
		if err := f.send(k); err != nil {
			return err
		}
	}
	buf := make([]byte, 14+f.tr.MTU())
	for f.inflight > 0 {
		n, err := f.tr.ReadFrame(buf)
		if err != nil {
			if time.Now().After(f.deadline) {
				return nil // the wait for the last replies ran out: they are lost
			}
			return err
		}
		k, err := f.reply(buf[:n])
		switch {
		case err != nil:
			return err
		case k >= 0 && time.Now().Before(f.deadline):
			if err := f.send(k); err != nil {
				return err
			}
		}
	}
	return nil
}

var errTarget = errors.New("the target failed a command")

// reply takes frame if it answers a frame in flight and returns its slot
// (-1 for any other frame).
func (f *flight) reply(frame []byte) (int, error) {
	var h aoe.Header
	if aoe.ParseHeader(frame, &h) != nil || !h.Flags.Has(aoe.FlagResponse) || h.Command != aoe.CmdATA ||
		h.Src != f.target || h.Major != f.shelf || h.Minor != f.slot {
		return -1, nil
	}
	k := int(h.Tag >> 16)
	if k >= len(f.frames) || !f.busy[k] || uint16(h.Tag) != f.gen[k] {
		return -1, nil
	}
	if h.Flags.Has(aoe.FlagError) {
		return k, fmt.Errorf("%w: AoE error %v", errTarget, h.Error)
	}
	var a aoe.ATAArg
	if err := aoe.ParseATAArg(frame, &a); err != nil {
		return k, err
	}
	if st := ata.Status(a.CmdStatus); st&(ata.StatusERR|ata.StatusDF) != 0 {
		return k, fmt.Errorf("%w: ATA status %#02x, error %#02x", errTarget, a.CmdStatus, a.ErrFeature)
	}
	if !f.write && len(frame) < aoe.ATADataOffset+f.sectors*512 {
		return k, fmt.Errorf("%w: a read reply of %d bytes", errTarget, len(frame))
	}
	f.busy[k] = false
	f.inflight--
	f.done++
	return k, nil
}

// pattern is byte i of every frame a write sends.
func pattern(i int) byte { return byte(i*7 + i>>9) }
