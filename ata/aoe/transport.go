package aoe

// Transport carries whole Ethernet frames, destination MAC first, without
// the FCS. PacketConn (AF_PACKET on a Linux interface) and UnixgramConn
// (a QEMU -netdev dgram socket) implement it.
type Transport interface {
	// ReadFrame reads the next frame into b and returns its length; a
	// longer frame is truncated to len(b). The Target calls it from one
	// goroutine.
	ReadFrame(b []byte) (int, error)
	// WriteFrame sends b as one frame. The Target calls it from several
	// goroutines at once; it must not retain b.
	WriteFrame(b []byte) error
	// MAC is the interface's address: the source of the Target's frames.
	MAC() MAC
	// MTU is the largest frame payload after the 14-byte Ethernet header.
	MTU() int
	// Close makes ReadFrame return an error.
	Close() error
}

// Address is a target's shelf (major) and slot (minor).
type Address struct {
	Shelf uint16
	Slot  uint8
}

// AddressFilter is implemented by a Transport that can drop, before
// ReadFrame sees them, the frames a Target ignores: responses (frames
// with FlagResponse, other targets' replies) and requests addressed to
// none of its disks. PacketConn does it in the kernel with a socket
// filter, so that the traffic of other targets on the same interface
// (vblade, another Target) costs this one no reads. Target.Serve calls
// FilterAddresses once, before the first ReadFrame; a Transport that
// cannot filter returns an error and delivers every frame, which the
// Target then sorts itself.
type AddressFilter interface {
	FilterAddresses(addrs []Address) error
}

// BatchTransport is implemented by a Transport that moves several frames
// per system call (PacketConn: recvmmsg and sendmmsg). The Target reads
// up to a batch of frames at once, runs them, and sends the replies it
// built in one call; a Transport without it moves one frame per call.
type BatchTransport interface {
	Transport
	// ReadFrames waits for at least one frame and reads the frames
	// already there, up to len(bufs): frame i into bufs[i], its length
	// in lens[i] (len(lens) >= len(bufs)). It returns how many it read.
	// The Target calls it from one goroutine.
	ReadFrames(bufs [][]byte, lens []int) (int, error)
	// WriteFrames sends each of frames as one frame, in order. It must
	// not retain them.
	WriteFrames(frames [][]byte) error
}
