package aoe

import (
	"errors"
	"fmt"
)

// EtherType is the Ethernet type of AoE frames.
const EtherType = 0x88A2

// Version is the AoE protocol version this package speaks (AoEr11).
const Version = 1

// Frame layout (offsets from the first byte of the destination MAC; the
// Ethernet FCS is not part of a frame here):
//
//	 0       6       12   14     15    16    18    19    20   24
//	+-------+-------+----+------+-----+-----+-----+-----+----+----------
//	|  dst  |  src  |type|ver|fl| err |major|minor| cmd | tag| argument
//	+-------+-------+----+------+-----+-----+-----+-----+----+----------
const (
	offDst      = 0
	offSrc      = 6
	offType     = 12
	offVerFlags = 14
	offError    = 15
	offMajor    = 16
	offMinor    = 18
	offCommand  = 19
	offTag      = 20

	// HeaderSize is the Ethernet header plus the AoE header.
	HeaderSize = 24
	// ATAArgSize is the ATA argument that follows the header of an ATA
	// command; sector data starts at HeaderSize+ATAArgSize.
	ATAArgSize = 12
	// ATADataOffset is where the sectors of an ATA frame start.
	ATADataOffset = HeaderSize + ATAArgSize
	// MinFrameSize is the shortest Ethernet frame without FCS (ETH_ZLEN);
	// replies are padded to it.
	MinFrameSize = 60
	// SectorSize is the unit of AoE's sector count.
	SectorSize = 512
	// MaxConfigString is the longest config string (AoEr11 3.2).
	MaxConfigString = 1024
	// ConfigArgSize is the fixed part of a query config argument.
	ConfigArgSize = 8
)

// Broadcast addresses of the major (shelf) and minor (slot) fields.
const (
	BroadcastMajor = 0xFFFF
	BroadcastMinor = 0xFF
)

// Flags are the low nibble of the version/flags byte.
type Flags uint8

const (
	// FlagResponse marks a reply (R).
	FlagResponse Flags = 0x08
	// FlagError marks a reply carrying an Error (E).
	FlagError Flags = 0x04
)

// Has reports whether every flag of g is set in f.
func (f Flags) Has(g Flags) bool { return f&g == g }

func (f Flags) String() string {
	s := ""
	if f.Has(FlagResponse) {
		s += "R"
	}
	if f.Has(FlagError) {
		s += "E"
	}
	if rest := f &^ (FlagResponse | FlagError); rest != 0 {
		s += fmt.Sprintf("|%#x", uint8(rest))
	}
	if s == "" {
		return "0"
	}
	return s
}

// Command is the AoE command code of a frame.
type Command uint8

const (
	CmdATA            Command = 0
	CmdQueryConfig    Command = 1
	CmdMACMask        Command = 2
	CmdReserveRelease Command = 3
)

var commandNames = [...]string{"ATA", "QueryConfig", "MACMask", "ReserveRelease"}

func (c Command) String() string {
	if int(c) < len(commandNames) {
		return commandNames[c]
	}
	if c >= 0xF0 {
		return fmt.Sprintf("Vendor(%#02x)", uint8(c))
	}
	return fmt.Sprintf("Command(%d)", uint8(c))
}

// Error is the error code of a reply with FlagError (AoEr11 2.3), as the
// Target sends it and Header carries it. It implements error, to be
// logged or returned as one; no function of this package returns it.
type Error uint8

const (
	ErrUnrecognizedCommand Error = 1
	ErrBadArgument         Error = 2
	ErrDeviceUnavailable   Error = 3
	ErrConfigStringPresent Error = 4
	ErrUnsupportedVersion  Error = 5
	ErrTargetReserved      Error = 6
)

var errorNames = [...]string{
	1: "unrecognized command code",
	2: "bad argument parameter",
	3: "device unavailable",
	4: "config string present",
	5: "unsupported version",
	6: "target is reserved",
}

func (e Error) Error() string {
	if int(e) < len(errorNames) && errorNames[e] != "" {
		return "aoe: " + errorNames[e]
	}
	return fmt.Sprintf("aoe: error %d", uint8(e))
}

// Sentinel errors of the codec.
var (
	// ErrShort is a frame or argument shorter than its fixed part or than
	// the lengths it declares.
	ErrShort = errors.New("aoe: frame too short")
	// ErrNotAoE is a frame whose EtherType is not 0x88A2.
	ErrNotAoE = errors.New("aoe: not an AoE frame")
	// ErrTooLong is an argument that does not fit the frame or the
	// protocol's limits (a config string over 1024 bytes, more than 255
	// directives or MACs).
	ErrTooLong = errors.New("aoe: argument too long")
)
