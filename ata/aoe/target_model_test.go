package aoe

import (
	"bytes"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// syncTarget runs a Target's dispatcher on the calling goroutine (its
// disk has one ATA host, so ATA commands run there too), so a test sees
// every reply to a frame, or that none came.
type syncTarget struct {
	tb fataler
	tg *Target
	d  *Disk
	p  *pipe
}

// fataler is what newSyncTarget needs of a *testing.T or *rapid.T.
type fataler interface{ Fatal(args ...any) }

func newSyncTarget(tb fataler, sectors uint64) (*syncTarget, *memBackend) {
	mem := &memBackend{data: make([]byte, sectors*512)}
	info := testInfo()
	info.Sectors = sectors
	d, err := NewDisk(0, 1, info, mem, 1)
	if err != nil {
		tb.Fatal(err)
	}
	p := newPipe(1500)
	tg := &Target{Transport: p, Disks: []*Disk{d}}
	if err := tg.init(); err != nil {
		tb.Fatal(err)
	}
	return &syncTarget{tb: tb, tg: tg, d: d, p: p}, mem
}

// do hands frame to the target and returns the frames it sent.
func (s *syncTarget) do(frame []byte) [][]byte {
	r := s.tg.b.reqs[0]
	r.buf = append(r.buf[:0], frame...)
	if len(r.buf) > s.tg.frameSize {
		r.buf = r.buf[:s.tg.frameSize]
	}
	if s.tg.handle(r) {
		s.tb.Fatal("a one-host disk queued a request")
	}
	s.tg.flush()
	var out [][]byte
	for {
		select {
		case f := <-s.p.out:
			out = append(out, f)
		default:
			return out
		}
	}
}

func frameFrom(src MAC, cmd Command, arg []byte) []byte {
	b := make([]byte, HeaderSize)
	(&Header{Dst: targetMAC, Src: src, Version: 1, Minor: 1, Command: cmd, Tag: 5}).Put(b)
	return append(b, arg...)
}

// targetModel is what the target should hold: the disk's sectors, the
// reservation, the MAC mask list and the config string.
type targetModel struct {
	disk    []byte
	reserve []MAC
	mask    []MAC
	config  string
}

// TestTargetModel drives a target with random requests from three
// initiators (I/O, reservations, mask edits, config sets) and checks every
// reply, or its absence, against targetModel.
func TestTargetModel(t *testing.T) {
	macs := []MAC{initiatorMAC, otherMAC, {0x52, 0x54, 0, 0, 0, 9}}
	const sectors = 16
	rapid.Check(t, func(t *rapid.T) {
		st, mem := newSyncTarget(t, sectors)
		m := &targetModel{disk: make([]byte, sectors*512)}
		one := func(frames [][]byte) []byte {
			if len(frames) != 1 {
				t.Fatalf("%d replies, want 1", len(frames))
			}
			var h Header
			if err := ParseHeader(frames[0], &h); err != nil || h.Tag != 5 || !h.Flags.Has(FlagResponse) {
				t.Fatalf("reply %+v %v", h, err)
			}
			return frames[0]
		}
		// expect checks the reply to a request from src: none if the mask
		// hides src, else one, with AoE error e (0: none).
		expect := func(src MAC, frames [][]byte, e Error) []byte {
			if len(m.mask) > 0 && !slices.Contains(m.mask, src) {
				if len(frames) != 0 {
					t.Fatalf("%d replies to a masked-out initiator", len(frames))
				}
				return nil
			}
			f := one(frames)
			var h Header
			ParseHeader(f, &h)
			if h.Flags.Has(FlagError) != (e != 0) || (e != 0 && h.Error != e) {
				t.Fatalf("reply error flag %v code %v, want %v", h.Flags, h.Error, e)
			}
			return f
		}
		reserved := func(src MAC) bool { return len(m.reserve) > 0 && !slices.Contains(m.reserve, src) }
		t.Repeat(map[string]func(*rapid.T){
			"write": func(t *rapid.T) {
				src := rapid.SampledFrom(macs).Draw(t, "src")
				lba := rapid.Uint64Range(0, sectors-2).Draw(t, "lba")
				data := rapid.SliceOfN(rapid.Byte(), 1024, 1024).Draw(t, "data")
				out := st.do(frameFrom(src, CmdATA, ataReq(ATAExtended|ATAWrite, 0x34, 2, lba, data)))
				want := Error(0)
				if reserved(src) {
					want = ErrTargetReserved
				}
				if f := expect(src, out, want); f != nil && want == 0 {
					copy(m.disk[lba*512:], data)
					if f[27] != 0x50 {
						t.Fatalf("write status %#x", f[27])
					}
				}
			},
			"read": func(t *rapid.T) {
				src := rapid.SampledFrom(macs).Draw(t, "src")
				lba := rapid.Uint64Range(0, sectors).Draw(t, "lba") // sectors-1 and sectors run past the end
				out := st.do(frameFrom(src, CmdATA, ataReq(ATAExtended, 0x24, 2, lba, nil)))
				want := Error(0)
				if reserved(src) {
					want = ErrTargetReserved
				}
				f := expect(src, out, want)
				if f == nil || want != 0 {
					return
				}
				if lba+2 > sectors {
					if f[27]&0x01 == 0 || f[25]&0x10 == 0 {
						t.Fatalf("read past the end: status %#x error %#x", f[27], f[25])
					}
					return
				}
				if f[27] != 0x50 || !bytes.Equal(f[ATADataOffset:], m.disk[lba*512:(lba+2)*512]) {
					t.Fatalf("read at %d: status %#x, data differs from the model", lba, f[27])
				}
			},
			"reserve": func(t *rapid.T) {
				src := rapid.SampledFrom(macs).Draw(t, "src")
				cmd := ReserveCmd(rapid.IntRange(0, 2).Draw(t, "rcmd"))
				list := rapid.SliceOfNDistinct(rapid.SampledFrom(macs), 0, 2, func(m MAC) MAC { return m }).Draw(t, "list")
				arg, _ := (&ReserveArg{Cmd: cmd, MACs: list}).Append(nil)
				out := st.do(frameFrom(src, CmdReserveRelease, arg))
				want := Error(0)
				if cmd == ReserveSet && reserved(src) {
					want = ErrTargetReserved
				}
				f := expect(src, out, want)
				if f == nil || want != 0 {
					return
				}
				if cmd != ReserveRead {
					m.reserve = slices.Clone(list)
				}
				var r ReserveArg
				if err := ParseReserveArg(f, &r); err != nil || !slices.Equal(r.MACs, m.reserve) {
					t.Fatalf("reservation %v (%v), model %v", r.MACs, err, m.reserve)
				}
			},
			"mask": func(t *rapid.T) {
				src := rapid.SampledFrom(macs).Draw(t, "src")
				dir := Directive{DirCmd(rapid.IntRange(1, 2).Draw(t, "dcmd")), rapid.SampledFrom(macs).Draw(t, "mac")}
				arg, _ := (&MaskArg{Cmd: MaskEdit, Directives: []Directive{dir}}).Append(nil)
				out := st.do(frameFrom(src, CmdMACMask, arg))
				if expect(src, out, 0) == nil {
					return
				}
				if i := slices.Index(m.mask, dir.MAC); dir.Cmd == DirAdd && i < 0 {
					m.mask = append(m.mask, dir.MAC)
				} else if dir.Cmd == DirDelete && i >= 0 {
					m.mask = slices.Delete(m.mask, i, i+1)
				}
			},
			"config": func(t *rapid.T) {
				src := rapid.SampledFrom(macs).Draw(t, "src")
				s := rapid.SampledFrom([]string{"", "a", "ab"}).Draw(t, "s")
				cmd := rapid.SampledFrom([]ConfigCmd{ConfigRead, ConfigSet, ConfigForceSet}).Draw(t, "ccmd")
				out := st.do(frameFrom(src, CmdQueryConfig, configReq(cmd, s)))
				want := Error(0)
				if cmd == ConfigSet && m.config != "" && s != m.config {
					want = ErrConfigStringPresent
				}
				f := expect(src, out, want)
				if f == nil || want != 0 {
					return
				}
				if cmd != ConfigRead {
					m.config = s
				}
				var c ConfigArg
				if err := ParseConfigArg(f, &c); err != nil || string(c.String) != m.config {
					t.Fatalf("config %q (%v), model %q", c.String, err, m.config)
				}
			},
			"": func(t *rapid.T) {
				if !bytes.Equal(mem.data, m.disk) {
					t.Fatal("backend differs from the model")
				}
			},
		})
	})
}
