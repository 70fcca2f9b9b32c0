package aoe

import (
	"encoding/binary"
	"net"
)

// MAC is an Ethernet address.
type MAC [6]byte

// BroadcastMAC is ff:ff:ff:ff:ff:ff.
var BroadcastMAC = MAC{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}

func (m MAC) String() string { return net.HardwareAddr(m[:]).String() }

// Header is the Ethernet header and the common AoE header of every frame
// (AoEr11 section 2), 24 bytes. Major is the shelf, Minor the slot; Tag is
// opaque to a target and echoed in its reply.
type Header struct {
	Dst, Src MAC
	Version  uint8 // high nibble of byte 14; 1 for AoEr11
	Flags    Flags
	Error    Error // meaningful only with FlagError
	Major    uint16
	Minor    uint8
	Command  Command
	Tag      uint32
}

// ParseHeader decodes the first HeaderSize bytes of frame. It fails with
// ErrShort or ErrNotAoE; it does not check the version.
func ParseHeader(frame []byte, h *Header) error {
	if len(frame) < HeaderSize {
		return ErrShort
	}
	if binary.BigEndian.Uint16(frame[offType:]) != EtherType {
		return ErrNotAoE
	}
	copy(h.Dst[:], frame[offDst:])
	copy(h.Src[:], frame[offSrc:])
	h.Version = frame[offVerFlags] >> 4
	h.Flags = Flags(frame[offVerFlags] & 0x0F)
	h.Error = Error(frame[offError])
	h.Major = binary.BigEndian.Uint16(frame[offMajor:])
	h.Minor = frame[offMinor]
	h.Command = Command(frame[offCommand])
	h.Tag = binary.BigEndian.Uint32(frame[offTag:])
	return nil
}

// Put encodes h into the first HeaderSize bytes of frame, which must be
// that long.
func (h *Header) Put(frame []byte) {
	_ = frame[HeaderSize-1]
	copy(frame[offDst:], h.Dst[:])
	copy(frame[offSrc:], h.Src[:])
	binary.BigEndian.PutUint16(frame[offType:], EtherType)
	frame[offVerFlags] = h.Version<<4 | uint8(h.Flags&0x0F)
	frame[offError] = uint8(h.Error)
	binary.BigEndian.PutUint16(frame[offMajor:], h.Major)
	frame[offMinor] = h.Minor
	frame[offCommand] = uint8(h.Command)
	binary.BigEndian.PutUint32(frame[offTag:], h.Tag)
}

// Reply turns h, a request's header, into the header of its reply from
// the target at (src, major, minor): addressed back to the request's
// sender, R set, the tag kept.
func (h *Header) Reply(src MAC, major uint16, minor uint8) {
	h.Dst, h.Src = h.Src, src
	h.Version, h.Flags, h.Error = Version, FlagResponse, 0
	h.Major, h.Minor = major, minor
}

// Matches reports whether a request for (major, minor) addresses the
// target at (shelf, slot), broadcast values included.
func Matches(major uint16, minor uint8, shelf uint16, slot uint8) bool {
	return (major == shelf || major == BroadcastMajor) && (minor == slot || minor == BroadcastMinor)
}
