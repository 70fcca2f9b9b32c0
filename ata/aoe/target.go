package aoe

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nhdkit/nhd/ata"
)

// Target serves Disks over a Transport, as an AoE target such as vblade
// does: it answers query config requests (broadcast ones included),
// executes ATA commands through each disk's ATA hosts, and keeps each
// disk's config string, MAC mask list and reservation (AoEr11 sections 3.2
// to 3.4). ATA errors travel in the ATA status and error fields; the AoE
// error field is used only for malformed or refused AoE requests.
//
// Frames are read by one goroutine. The ATA commands of a Disk with one
// ata.Host run on that goroutine, in arrival order, as vblade runs them:
// no hand-off between goroutines, the least work per frame, the right
// choice for a backend that answers at once (a file, memory). The
// commands of a Disk with several Hosts run on one goroutine per Host,
// concurrently, for backends with latency to hide (an NBD export).
// Replies go out from the goroutine that built them. If the Transport
// is a BatchTransport, the reading goroutine reads the frames queued at
// once in one call and sends the replies it built for them in one call.
// If it implements AddressFilter, Serve first asks it to drop the frames
// addressed to no disk. In steady state no ATA request allocates, not
// even one the device ends in error: frame buffers come from a fixed
// pool, AoE error replies use the reading goroutine's buffer, and each
// goroutine running ATA commands has its own ata.Error for Host.ExecErr
// to fill. The rare control requests (query config, MAC mask,
// reserve/release) build their replies in new buffers. The same
// ATA command may arrive twice (Linux retransmits with a new tag), and
// each arrival is executed.
type Target struct {
	Transport Transport
	Disks     []*Disk
	// Logger receives refused requests and transport errors at Debug
	// level; nil discards them.
	Logger *slog.Logger

	mac        MAC
	maxSectors int
	frameSize  int
	free       chan *request      // requests with their frame buffers, reused
	b          batch              // the reading goroutine's frames and replies
	errBuf     [MinFrameSize]byte // replyError's frame
	ataErr     ata.Error          // the reading goroutine's, for one-Host disks
}

type request struct {
	buf []byte // the frame, len = its length
	h   Header
	a   ATAArg
}

// Serve announces every disk with an unsolicited config reply to the
// broadcast address, then serves frames until the Transport fails (Close
// it, or cancel ctx, to stop). It returns the Transport's error, or nil
// after ctx is done. It first checks the Target and its Disks, and
// returns an error matching ErrConfig, ErrDisk or ErrSectorSize if they
// cannot be served.
func (t *Target) Serve(ctx context.Context) error {
	if err := t.init(); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { t.Transport.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	if f, ok := t.Transport.(AddressFilter); ok {
		if err := f.FilterAddresses(t.addresses()); err != nil {
			t.log("aoe: no address filter", "err", err)
		}
	}
	for _, d := range t.Disks {
		if len(d.Hosts) > 1 {
			d.queue = make(chan *request, d.bufferCount())
			defer close(d.queue)
			for _, h := range d.Hosts {
				wg.Add(1)
				go func() {
					defer wg.Done()
					t.work(d, h)
				}()
			}
		}
		t.announce(d)
	}
	for {
		n, err := t.read()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for i, r := range t.b.reqs[:n] {
			if t.handle(r) {
				t.b.reqs[i] = <-t.free // r is a worker's now
			}
		}
		t.flush()
	}
}

func (t *Target) init() error {
	if err := t.validate(); err != nil {
		return err
	}
	buffers := 0
	for _, d := range t.Disks {
		if len(d.Hosts) > 1 {
			buffers += d.bufferCount() + len(d.Hosts)
		}
	}
	t.mac = t.Transport.MAC()
	t.maxSectors = min((t.Transport.MTU()-(ATADataOffset-14))/SectorSize, 255)
	if t.maxSectors < 1 {
		return fmt.Errorf("%w: MTU %d too small for one sector", ErrConfig, t.Transport.MTU())
	}
	t.frameSize = max(14+t.Transport.MTU(), MinFrameSize)
	t.b = newBatch(t.frameSize)
	t.free = make(chan *request, buffers)
	for range buffers {
		t.free <- &request{buf: frameBuffer(t.frameSize)}
	}
	return nil
}

func (t *Target) log(msg string, args ...any) {
	if t.Logger != nil {
		t.Logger.Debug(msg, args...)
	}
}

// handle dispatches one frame; it reports whether the request was handed
// to a worker (which then owns it, and returns it to the pool). An ATA
// command goes to the first disk it addresses; the other commands to every
// disk they address (a broadcast query config gets one reply per disk).
func (t *Target) handle(r *request) bool {
	if ParseHeader(r.buf, &r.h) != nil || r.h.Flags.Has(FlagResponse) {
		return false
	}
	for _, d := range t.Disks {
		if !Matches(r.h.Major, r.h.Minor, d.Shelf, d.Slot) {
			continue
		}
		if len(d.mask) > 0 && !contains(d.mask, r.h.Src) {
			t.log("aoe: dropped, not in the MAC mask", "src", r.h.Src, "disk", d.Slot)
			continue
		}
		if r.h.Command == CmdATA && r.h.Version == Version {
			return t.queueATA(d, r) // r is the worker's from here on
		}
		t.control(d, r)
	}
	return false
}

// queueATA runs an ATA request of a one-Host disk at once, hands it to
// the workers of a disk with several, or answers it at once if it is
// refused. A full queue drops it: the initiator retransmits.
func (t *Target) queueATA(d *Disk, r *request) bool {
	if err := ParseATAArg(r.buf, &r.a); err != nil {
		t.replyError(d, &r.h, ErrBadArgument)
		return false
	}
	if len(d.reserve) > 0 && !contains(d.reserve, r.h.Src) && r.a.CmdStatus != 0xEC {
		t.replyError(d, &r.h, ErrTargetReserved)
		return false
	}
	if d.queue == nil {
		reply := t.replyBuf()
		t.b.out = append(t.b.out, reply[:t.runATA(d, d.Hosts[0], r, reply, &t.ataErr)])
		return false
	}
	select {
	case d.queue <- r:
		return true
	default:
		t.log("aoe: queue full, dropped", "disk", d.Slot, "tag", r.h.Tag)
		return false
	}
}

// work runs the ATA requests of d's queue on host until the queue closes,
// with a reply frame and an ata.Error of its own.
func (t *Target) work(d *Disk, host *ata.Host) {
	reply := frameBuffer(t.frameSize)[:t.frameSize]
	var ae ata.Error
	for r := range d.queue {
		n := t.runATA(d, host, r, reply, &ae)
		if err := t.Transport.WriteFrame(reply[:n]); err != nil {
			t.log("aoe: write", "err", err)
		}
		t.free <- r
	}
}

// runATA executes r's ATA command on host and builds the reply in reply,
// returning its length; ae is the calling goroutine's (see execATA).
func (t *Target) runATA(d *Disk, host *ata.Host, r *request, reply []byte, ae *ata.Error) int {
	r.h.Reply(t.mac, d.Shelf, d.Slot)
	return execATA(host, r.buf, &r.h, &r.a, reply, t.maxSectors, ae)
}

// addresses lists the shelf.slot of every disk, for an AddressFilter.
func (t *Target) addresses() []Address {
	a := make([]Address, len(t.Disks))
	for i, d := range t.Disks {
		a[i] = Address{Shelf: d.Shelf, Slot: d.Slot}
	}
	return a
}

// replyError sends an AoE error reply to req at once. It runs on the
// reading goroutine only, whose buffer errBuf is (a frame on the stack
// would escape through the Transport interface: an allocation).
func (t *Target) replyError(d *Disk, req *Header, e Error) {
	b := t.errBuf[:]
	h := *req
	h.Reply(t.mac, d.Shelf, d.Slot)
	n := errorReply(b, &h, e)
	if err := t.Transport.WriteFrame(b[:n]); err != nil {
		t.log("aoe: write", "err", err)
	}
}

// control answers the non-ATA commands, and ATA frames of another
// protocol version, on the reading goroutine.
func (t *Target) control(d *Disk, r *request) {
	if r.h.Version != Version {
		t.replyError(d, &r.h, ErrUnsupportedVersion)
		return
	}
	switch r.h.Command {
	case CmdQueryConfig:
		t.queryConfig(d, r)
	case CmdMACMask:
		t.macMask(d, r)
	case CmdReserveRelease:
		t.reserveRelease(d, r)
	default:
		if r.h.Command < 0xF0 { // vendor commands are ignored
			t.replyError(d, &r.h, ErrUnrecognizedCommand)
		}
	}
}

func (t *Target) announce(d *Disk) {
	h := Header{Dst: BroadcastMAC, Src: t.mac, Version: Version, Flags: FlagResponse,
		Major: d.Shelf, Minor: d.Slot, Command: CmdQueryConfig}
	t.sendConfig(d, &h, ConfigRead)
}

func (t *Target) sendConfig(d *Disk, h *Header, cmd ConfigCmd) {
	b := make([]byte, HeaderSize, HeaderSize+ConfigArgSize+len(d.Config))
	h.Put(b)
	c := ConfigArg{BufferCount: uint16(d.bufferCount()), Firmware: d.Firmware,
		SectorCount: uint8(t.maxSectors), Version: Version, Cmd: cmd, String: d.Config}
	b, _ = c.Append(b)
	for len(b) < MinFrameSize {
		b = append(b, 0)
	}
	if err := t.Transport.WriteFrame(b); err != nil {
		t.log("aoe: write", "err", err)
	}
}

func (t *Target) queryConfig(d *Disk, r *request) {
	var c ConfigArg
	if err := ParseConfigArg(r.buf, &c); err != nil && !malformedRead(r.buf) {
		return // vblade stays silent on a malformed non-read query
	}
	switch c.Cmd {
	case ConfigRead:
	case ConfigTest:
		if !bytes.Equal(c.String, d.Config) {
			return
		}
	case ConfigTestPrefix:
		if !bytes.HasPrefix(d.Config, c.String) {
			return
		}
	case ConfigSet:
		if len(d.Config) > 0 && !bytes.Equal(c.String, d.Config) {
			t.replyError(d, &r.h, ErrConfigStringPresent)
			return
		}
		d.Config = append(d.Config[:0:0], c.String...)
	case ConfigForceSet:
		d.Config = append(d.Config[:0:0], c.String...)
	default:
		t.replyError(d, &r.h, ErrBadArgument)
		return
	}
	h := r.h
	h.Reply(t.mac, d.Shelf, d.Slot)
	t.sendConfig(d, &h, c.Cmd)
}

// malformedRead reports whether a query config frame that ParseConfigArg
// refused (its string over 1024 bytes or past the frame, or a frame too
// short for the fixed part) is to be answered as a read: when its ccmd
// is ConfigRead, or it is too short to carry one. Its ccmd is read from
// the frame, since ParseConfigArg fills nothing on an error.
func malformedRead(frame []byte) bool {
	const offCcmd = HeaderSize + 5
	return len(frame) <= offCcmd || ConfigCmd(frame[offCcmd]&0x0F) == ConfigRead
}
