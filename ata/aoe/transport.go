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
