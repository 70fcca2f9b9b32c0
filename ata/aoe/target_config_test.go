package aoe

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// A query config whose string is over 1024 bytes or runs past the frame
// is answered only when it is a read (with the current string, as vblade
// does); a malformed test or set gets no reply and changes nothing.
// Before, every malformed query was answered as a read.
func TestTargetConfigMalformed(t *testing.T) {
	s, _ := newSyncTarget(t, testSectors)
	s.d.Config = []byte("cfg")
	// A read reply: bufcnt 16, firmware 0, 2 sectors, version 1 ccmd 0, "cfg".
	readReply := unhex(t, `52 54 00 12 34 56   02 00 00 00 ae 01   88 a2   18 00   00 00 01 01   00 00 00 05
		00 10 00 00 02 10 00 03   63 66 67
		00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00`)
	for _, tc := range []struct {
		name  string
		cmd   ConfigCmd
		cslen int // the declared length
		n     int // the string bytes in the frame
		reply bool
	}{
		{"set, 1025 bytes", ConfigSet, MaxConfigString + 1, MaxConfigString + 1, false},
		{"force set, past the frame", ConfigForceSet, 10, 4, false},
		{"test, 1025 bytes", ConfigTest, MaxConfigString + 1, MaxConfigString + 1, false},
		{"test prefix, past the frame", ConfigTestPrefix, 10, 0, false},
		{"read, 1025 bytes", ConfigRead, MaxConfigString + 1, MaxConfigString + 1, true},
		{"read, past the frame", ConfigRead, 10, 4, true},
	} {
		arg := make([]byte, ConfigArgSize+tc.n)
		arg[5] = 0x10 | uint8(tc.cmd)
		binary.BigEndian.PutUint16(arg[6:], uint16(tc.cslen))
		copy(arg[ConfigArgSize:], "xyzw")
		out := s.do(frameFrom(initiatorMAC, CmdQueryConfig, arg))
		switch {
		case !tc.reply && len(out) != 0:
			t.Errorf("%s: %d replies, want none", tc.name, len(out))
		case tc.reply && (len(out) != 1 || !bytes.Equal(out[0], readReply)):
			t.Errorf("%s: replies %x\nwant %x", tc.name, out, readReply)
		}
		if string(s.d.Config) != "cfg" {
			t.Fatalf("%s: config string now %q", tc.name, s.d.Config)
		}
	}
}
