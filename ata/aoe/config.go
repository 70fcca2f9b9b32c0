package aoe

import "encoding/binary"

// ConfigCmd is the sub-command of a query config request (AoEr11 3.2).
type ConfigCmd uint8

const (
	// ConfigRead returns the config string.
	ConfigRead ConfigCmd = 0
	// ConfigTest replies only if the string matches exactly.
	ConfigTest ConfigCmd = 1
	// ConfigTestPrefix replies only if the argument is a prefix of it.
	ConfigTestPrefix ConfigCmd = 2
	// ConfigSet sets the string if none is set.
	ConfigSet ConfigCmd = 3
	// ConfigForceSet sets the string unconditionally.
	ConfigForceSet ConfigCmd = 4
)

var configCmdNames = [...]string{"Read", "Test", "TestPrefix", "Set", "ForceSet"}

func (c ConfigCmd) String() string {
	if int(c) < len(configCmdNames) {
		return configCmdNames[c]
	}
	return "ConfigCmd(" + itoa(int(c)) + ")"
}

// ConfigArg is the argument of a query config frame (AoEr11 3.2) at
// offset 24:
//
//	24 buffer count (BE16) | 26 firmware version (BE16) | 28 sector count |
//	29 version<<4 | ccmd | 30 config string length (BE16) | 32 string
//
// String aliases the frame it was parsed from.
type ConfigArg struct {
	BufferCount uint16
	Firmware    uint16
	SectorCount uint8
	Version     uint8
	Cmd         ConfigCmd
	String      []byte
}

// ParseConfigArg decodes the query config argument of frame. The string
// length comes from its field, not from the frame's length (which may be
// padded).
func ParseConfigArg(frame []byte, c *ConfigArg) error {
	if len(frame) < HeaderSize+ConfigArgSize {
		return ErrShort
	}
	b := frame[HeaderSize:]
	n := int(binary.BigEndian.Uint16(b[6:]))
	if n > MaxConfigString {
		return ErrTooLong
	}
	if len(b) < ConfigArgSize+n {
		return ErrShort
	}
	c.BufferCount = binary.BigEndian.Uint16(b[0:])
	c.Firmware = binary.BigEndian.Uint16(b[2:])
	c.SectorCount = b[4]
	c.Version, c.Cmd = b[5]>>4, ConfigCmd(b[5]&0x0F)
	c.String = b[ConfigArgSize : ConfigArgSize+n]
	return nil
}

// Append appends the encoded argument to b (a frame's first HeaderSize
// bytes, usually) and returns the extended slice.
func (c *ConfigArg) Append(b []byte) ([]byte, error) {
	if len(c.String) > MaxConfigString {
		return b, ErrTooLong
	}
	b = binary.BigEndian.AppendUint16(b, c.BufferCount)
	b = binary.BigEndian.AppendUint16(b, c.Firmware)
	b = append(b, c.SectorCount, c.Version<<4|uint8(c.Cmd&0x0F))
	b = binary.BigEndian.AppendUint16(b, uint16(len(c.String)))
	return append(b, c.String...), nil
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for ; n > 0; n /= 10 {
		i--
		b[i] = byte('0' + n%10)
	}
	return string(b[i:])
}
