package ata_test

import (
	"context"
	"testing"

	"github.com/nhdkit/nhd/ata"
)

const fuzzSectors = 64

// guardDisk fails the fuzz test on any write outside the sectors the
// current command addresses, computed by the harness from its own shadow
// of the registers.
type guardDisk struct {
	t      *testing.T
	data   []byte
	lo, hi uint64 // allowed write range in sectors, [lo, hi)
	trim   bool   // a DATA SET MANAGEMENT command may trim
}

func (g *guardDisk) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > int64(len(g.data)) {
		g.t.Fatalf("read [%d,+%d) outside the disk", off, len(p))
	}
	return copy(p, g.data[off:]), nil
}

func (g *guardDisk) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || uint64(off) < g.lo*512 || uint64(off)+uint64(len(p)) > g.hi*512 || uint64(off)+uint64(len(p)) > uint64(len(g.data)) {
		g.t.Fatalf("write [%d,+%d) outside the addressed sectors [%d,%d)", off, len(p), g.lo, g.hi)
	}
	return copy(g.data[off:], p), nil
}

func (g *guardDisk) Flush(context.Context) error { return nil }

func (g *guardDisk) Trim(_ context.Context, off, length int64) error {
	if !g.trim || off < 0 || length <= 0 || off+length > int64(len(g.data)) || off%512 != 0 || length%512 != 0 {
		g.t.Fatalf("trim [%d,+%d) not allowed", off, length)
	}
	clear(g.data[off : off+length])
	return nil
}

// shadow is the harness's own copy of the registers, kept from the writes
// the device accepted (no BSY or DRQ in the alternate status) and, when a
// command ends, from the output registers the device writes back (a
// native max address, the LBA of an error, a signature), which the next
// command starts from.
type shadow struct {
	cur, prev [8]uint8
	geom      ata.Geometry
}

// learn takes the count, LBA and device registers, current and HOB bytes,
// from the device's output task file.
func (s *shadow) learn(tf ata.TaskFile) {
	s.cur[2], s.cur[3], s.cur[4], s.cur[5], s.cur[6] = tf.Count, tf.LBALow, tf.LBAMid, tf.LBAHigh, uint8(tf.Device)
	s.prev[2], s.prev[3], s.prev[4], s.prev[5] = tf.HOBCount, tf.HOBLBALow, tf.HOBLBAMid, tf.HOBLBAHigh
}

func (s *shadow) allowed(op ata.Opcode) (lo, hi uint64) {
	var lba uint64
	var n uint64
	switch op {
	case 0x34, 0x35, 0x39, 0x3D, 0xCE: // 48-bit writes
		lba = uint64(s.cur[3]) | uint64(s.cur[4])<<8 | uint64(s.cur[5])<<16 | uint64(s.prev[3])<<24 | uint64(s.prev[4])<<32 | uint64(s.prev[5])<<40
		n = uint64(s.cur[2]) | uint64(s.prev[2])<<8
		if n == 0 {
			n = 65536
		}
	case 0x30, 0x31, 0xC5, 0xCA, 0xCB: // 28-bit writes
		n = uint64(s.cur[2])
		if n == 0 {
			n = 256
		}
		dev := s.cur[6]
		if dev&0x40 != 0 {
			lba = uint64(s.cur[3]) | uint64(s.cur[4])<<8 | uint64(s.cur[5])<<16 | uint64(dev&15)<<24
		} else {
			c, h, sec := uint64(s.cur[4])|uint64(s.cur[5])<<8, uint64(dev&15), uint64(s.cur[3])
			g := s.geom
			if sec == 0 || sec > uint64(g.SectorsPerTrack) || h >= uint64(g.Heads) || c >= uint64(g.Cylinders) {
				return 0, 0
			}
			lba = (c*uint64(g.Heads)+h)*uint64(g.SectorsPerTrack) + sec - 1
		}
	default:
		return 0, 0
	}
	return lba, min(lba+n, fuzzSectors)
}

// FuzzRegisters feeds arbitrary register and data-register accesses to a
// device: it must not panic, hang or take an illegal state step, and the
// backend must see no write outside the sectors the accepted command
// addresses.
//
// Program bytes, each access chosen by b&7:
//
//	0 reg val      WriteReg(reg%9, val)
//	1 reg          ReadReg(reg%9)
//	2 lo hi        WriteData16
//	3              ReadData16
//	4 b0 b1 b2 b3  WriteData32
//	5              ReadData32
//	6 op           WriteReg(RegCommand, op)
//	7 n dir        bulk: n*2 bytes through WriteData (dir odd) or ReadData
func FuzzRegisters(f *testing.F) {
	f.Add([]byte{6, 0xEC, 7, 255, 0, 7, 2, 0})
	f.Add([]byte{0, 6, 0xE0, 0, 2, 2, 0, 3, 5, 6, 0x30, 7, 255, 1, 7, 255, 1, 7, 2, 1})
	f.Fuzz(func(t *testing.T, prog []byte) {
		disk := &guardDisk{t: t, data: make([]byte, fuzzSectors*512)}
		eng := &ata.BufferDMA{Buf: make([]byte, fuzzSectors*512)}
		for i := range eng.Buf {
			eng.Buf[i] = byte(i * 7)
		}
		info := testInfo(fuzzSectors)
		info.MaxMultiple = 4
		d, err := ata.NewDevice(ata.Config{Info: info, Backend: disk, DMA: eng})
		if err != nil {
			t.Fatal(err)
		}
		// Power-on registers hold the signature: count 1, LBA low 1, HOB
		// bytes 0.
		sig := [8]uint8{0, 0, 1, 1, 0, 0, 0}
		sh := shadow{cur: sig, geom: ata.DefaultGeometry(fuzzSectors)}
		srst := false
		running := false // a command was accepted and has not ended yet
		idleNoSel := func() bool {
			return !srst && ata.Status(d.ReadReg(ata.RegAltStatus))&(ata.StatusBSY|ata.StatusDRQ) == 0
		}
		command := func(op uint8) {
			// Accepted: not busy, no DRQ, no SRST, and device 0 selected
			// (EXECUTE DEVICE DIAGNOSTIC runs for either). An ignored
			// command leaves the previous command's range in force.
			dev0 := sh.cur[6]&0x10 == 0
			accepted := idleNoSel() && (dev0 || op == 0x90)
			if accepted {
				disk.lo, disk.hi = sh.allowed(ata.Opcode(op))
				disk.trim = op == 0x06
			}
			d.WriteReg(ata.RegCommand, op)
			if !accepted {
				return
			}
			running = true
			st := ata.Status(d.ReadReg(ata.RegAltStatus))
			if op == 0x91 && st&ata.StatusERR == 0 && sh.cur[2] != 0 {
				sh.geom = ata.TranslatedGeometry(fuzzSectors, sh.cur[6]&15+1, sh.cur[2])
			}
			if op == 0x90 {
				sh.cur, sh.prev = sig, [8]uint8{}
			}
		}
		buf := make([]byte, 512)
		arg := func(i int) uint8 {
			if i < len(prog) {
				return prog[i]
			}
			return 0
		}
		for i := 0; i < len(prog); {
			switch prog[i] & 7 {
			case 0:
				r, v := ata.Reg(arg(i+1)%9), arg(i+2)
				i += 3
				switch {
				case r == ata.RegCommand:
					command(v)
				case r == ata.RegDeviceControl:
					was := srst
					srst = v&uint8(ata.ControlSRST) != 0
					if srst {
						running = false // SRST abandons the command
					}
					if was && !srst {
						sh.cur, sh.prev = sig, [8]uint8{}
					}
					d.WriteReg(r, v)
				case r == ata.RegData:
					d.WriteReg(r, v)
				default:
					if !srst && ata.Status(d.ReadReg(ata.RegAltStatus))&(ata.StatusBSY|ata.StatusDRQ) == 0 {
						sh.prev[r], sh.cur[r] = sh.cur[r], v
					}
					d.WriteReg(r, v)
				}
			case 1:
				d.ReadReg(ata.Reg(arg(i+1) % 9))
				i += 2
			case 2:
				d.WriteData16(uint16(arg(i+1)) | uint16(arg(i+2))<<8)
				i += 3
			case 3:
				d.ReadData16()
				i++
			case 4:
				d.WriteData32(uint32(arg(i+1)) | uint32(arg(i+2))<<8 | uint32(arg(i+3))<<16 | uint32(arg(i+4))<<24)
				i += 5
			case 5:
				d.ReadData32()
				i++
			case 6:
				command(arg(i + 1))
				i += 2
			case 7:
				n := int(arg(i+1)) * 2
				if n > len(buf) {
					n = len(buf)
				}
				if arg(i+2)&1 != 0 {
					d.WriteData(buf[:n])
				} else {
					d.ReadData(buf[:n])
				}
				i += 3
			}
			if err := d.Fault(); err != nil {
				t.Fatalf("illegal state step: %v", err)
			}
			if running && idleNoSel() {
				sh.learn(d.TaskFile())
				running = false
			}
			if st := d.Status(); st&ata.StatusBSY != 0 && d.State() != ata.StateReset {
				t.Fatalf("BSY left set in state %v", d.State())
			}
		}
	})
}

// FuzzDecodeFIS: any 20 bytes parse or fail cleanly; what decodes
// re-encodes to a task file that decodes the same and survives the FIS.
func FuzzDecodeFIS(f *testing.F) {
	for _, g := range goldenFIS {
		f.Add(unhexF(g.fis), uint16(1000), uint8(16), uint8(63))
	}
	f.Fuzz(func(t *testing.T, b []byte, cyl uint16, heads, spt uint8) {
		var tf ata.TaskFile
		if err := tf.ParseFIS(b); err != nil {
			return
		}
		var fis [ata.FISSize]byte
		tf.PutFIS(&fis)
		var again ata.TaskFile
		if err := again.ParseFIS(fis[:]); err != nil || again != tf {
			t.Fatalf("FIS round trip: %v %+v %+v", err, tf, again)
		}
		g := ata.Geometry{Cylinders: cyl, Heads: heads, SectorsPerTrack: spt}
		var c ata.Command
		if err := ata.Decode(&tf, g, &c); err != nil {
			return
		}
		var tf2 ata.TaskFile
		if err := c.Encode(g, &tf2); err != nil {
			t.Fatalf("Encode(Decode(%+v)) = %v", tf, err)
		}
		var c2 ata.Command
		if err := ata.Decode(&tf2, g, &c2); err != nil || c2 != c {
			t.Fatalf("second decode %v: %+v != %+v", err, c2, c)
		}
	})
}

// FuzzParseIdentify: any input parses or fails cleanly; accepted data
// round-trips through Bytes, and data with the A5h signature is accepted
// only with a correct checksum.
func FuzzParseIdentify(f *testing.F) {
	id := testInfo(1 << 30).Identify()
	b := id.Bytes()
	f.Add(b[:])
	f.Add(make([]byte, 512))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, err := ata.ParseIdentify(b)
		if err != nil {
			return
		}
		out := id.Bytes()
		if string(out[:]) != string(b[:512]) {
			t.Fatal("Bytes(ParseIdentify(b)) != b")
		}
		if b[510] == 0xA5 {
			var sum byte
			for _, x := range b[:512] {
				sum += x
			}
			if sum != 0 {
				t.Fatalf("accepted signed data summing to %d", sum)
			}
		}
		_ = id.Model() + id.Serial() + id.Firmware()
		_ = id.Sectors()
	})
}

func unhexF(s string) []byte {
	var out []byte
	for i := 0; i+1 < len(s); {
		if s[i] == ' ' {
			i++
			continue
		}
		out = append(out, fromHex(s[i])<<4|fromHex(s[i+1]))
		i += 2
	}
	return out
}

func fromHex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}
