package dma

import (
	"sync/atomic"
	"time"
)

// Clock is the engine's time source. The engine reads Now at the start of a
// transfer and, when it models time (Config.Timing), calls AdvanceTo with
// the modelled end of the transfer.
//
// A Clock must be safe for concurrent use.
type Clock interface {
	// Now returns the time since the clock's origin.
	Now() time.Duration
	// AdvanceTo tells the clock that modelled work ran until t. A virtual
	// clock jumps forward to t (never back); a wall clock ignores it,
	// since real work took real time.
	AdvanceTo(t time.Duration)
}

// WallClock is real time since its creation. The zero value counts from the
// first call to Now.
type WallClock struct {
	start atomic.Pointer[time.Time]
}

// NewWallClock returns a wall clock counting from now.
func NewWallClock() *WallClock {
	c := &WallClock{}
	now := time.Now()
	c.start.Store(&now)
	return c
}

// Now returns the real time since the clock's origin.
func (c *WallClock) Now() time.Duration {
	s := c.start.Load()
	if s == nil {
		now := time.Now()
		c.start.CompareAndSwap(nil, &now)
		s = c.start.Load()
	}
	return time.Since(*s)
}

// AdvanceTo does nothing: real time advances by itself.
func (c *WallClock) AdvanceTo(time.Duration) {}

// VirtualClock is simulated time: it stands still until the engine advances
// it with the modelled cost of its work. The zero value starts at 0.
type VirtualClock struct {
	now atomic.Int64
}

// Now returns the virtual time.
func (c *VirtualClock) Now() time.Duration { return time.Duration(c.now.Load()) }

// AdvanceTo moves the clock forward to t; an earlier t is ignored.
func (c *VirtualClock) AdvanceTo(t time.Duration) {
	for {
		old := c.now.Load()
		if int64(t) <= old || c.now.CompareAndSwap(old, int64(t)) {
			return
		}
	}
}

// Advance moves the clock forward by d.
func (c *VirtualClock) Advance(d time.Duration) { c.now.Add(int64(d)) }

// Timing is a timing profile: what each step of a transfer costs in the
// NHD's front end (host <-IDE-> FPGA FIFO <-CPU bus-> embedded CPU), so the
// engine can model a transfer's duration from the work it actually does.
//
// The host side of the FIFO is the IDE bus in a DMA mode: a sector takes
// SectorSize/HostBusWidth cycles of HostCycle, plus HostBurstOverhead. The
// CPU side moves a sector in SectorSize/CPUBusWidth accesses, each PIOAccess
// when the CPU copies by programmed I/O (StoreAndForward) or DMAAccess when
// its DMA controller does (Streaming). Each interrupt to the CPU costs
// Interrupt; each time the CPU starts a data movement (one sector in
// StoreAndForward, the whole transfer in Streaming) it runs Software. The
// host's completion (its interrupt, the kernel to user copy, the process
// switch: the paper's N1) costs HostCompletion.
type Timing struct {
	HostBusWidth      int           // bytes per IDE cycle: 2 (16-bit bus)
	HostCycle         time.Duration // IDE cycle time: 120 ns for MDMA mode 2
	HostBurstOverhead time.Duration // extra IDE time per sector burst
	CPUBusWidth       int           // bytes per CPU <-> FIFO access
	PIOAccess         time.Duration // one CPU access by programmed I/O
	DMAAccess         time.Duration // one access by the CPU's DMA controller
	Interrupt         time.Duration // one interrupt to the CPU
	Software          time.Duration // CPU software per data movement it starts
	HostCompletion    time.Duration // the host's completion cost (N1)
}

// hostSector is the IDE time of one sector.
func (t *Timing) hostSector() time.Duration {
	return time.Duration(SectorSize/t.HostBusWidth)*t.HostCycle + t.HostBurstOverhead
}

// cpuSector is the CPU bus time of one sector in mode m.
func (t *Timing) cpuSector(m Mode) time.Duration {
	a := t.DMAAccess
	if m == StoreAndForward {
		a = t.PIOAccess
	}
	return time.Duration(SectorSize/t.CPUBusWidth) * a
}

// PaperBefore is the NHD paper's front end before optimisation, to run in
// StoreAndForward mode: MDMA mode 2 (120 ns cycle, 16-bit bus) to the host,
// with 1.28 us of overhead per sector burst so a sector takes the 32 us the
// paper measured instead of the nominal 30.72 us; a 16-bit CPU bus with PIO
// accesses of 540 ns; a 60 us interrupt and 34 us of software per sector;
// 495 us of host completion. The paper's total for a 64 KiB read is
// 34287 us.
func PaperBefore() Timing {
	return Timing{
		HostBusWidth:      2,
		HostCycle:         120 * time.Nanosecond,
		HostBurstOverhead: 1280 * time.Nanosecond,
		CPUBusWidth:       2,
		PIOAccess:         540 * time.Nanosecond,
		DMAAccess:         120 * time.Nanosecond,
		Interrupt:         60 * time.Microsecond,
		Software:          34 * time.Microsecond,
		HostCompletion:    495 * time.Microsecond,
	}
}

// PaperAfter is the paper's front end with DMA streaming, to run in
// Streaming mode: PaperBefore with the FPGA data bus widened to 32 bits and
// the CPU's DMA controller moving data to the FIFO. The paper does not give
// the DMA controller's access time; this profile assumes the FPGA's 120 ns
// cycle, so the CPU side is twice as fast as the IDE side and the IDE bus
// sets the pace, as in the paper. The paper's total for a 64 KiB read is
// 4250 + 495 us.
func PaperAfter() Timing {
	t := PaperBefore()
	t.CPUBusWidth = 4
	return t
}
