package aoe

import (
	"bytes"
	"testing"
)

// A MAC mask edit that fails at a directive is answered with the 4-byte
// argument alone: merror and dcnt = the failing directive's index (vblade's
// reply), so that dcnt never disagrees with the body. The directives
// before it stay applied. Before, the body was the whole list with dcnt
// overwritten by the index: a decoder read a truncated list.
func TestTargetMACMaskEditFails(t *testing.T) {
	s, _ := newSyncTarget(t, testSectors)
	const replyHdr = `52 54 00 12 34 56   02 00 00 00 ae 01   88 a2   18 00   00 00 01 02   00 00 00 05`
	edit := func(dirs ...Directive) []byte {
		arg, _ := (&MaskArg{Cmd: MaskEdit, Directives: dirs}).Append(nil)
		out := s.do(frameFrom(initiatorMAC, CmdMACMask, arg))
		if len(out) != 1 {
			t.Fatalf("%d replies", len(out))
		}
		return out[0]
	}
	m := func(b byte) MAC { return MAC{0x52, 0x54, 0x00, 0x00, 0x00, b} }
	got := edit(Directive{DirAdd, initiatorMAC}, Directive{DirAdd, m(2)}, Directive{DirAdd, m(3)})
	want := unhex(t, replyHdr+`00 01 00 03
		00 00 52 54 00 12 34 56   00 00 52 54 00 00 00 02   00 00 52 54 00 00 00 03
		00 00 00 00 00 00 00 00`)
	if !bytes.Equal(got, want) {
		t.Fatalf("edit reply %x\nwant %x", got, want)
	}
	got = edit(Directive{DirAdd, m(4)}, Directive{DirCmd(7), m(5)}, Directive{DirAdd, m(6)})
	want = unhex(t, replyHdr+`00 01 02 01
		00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00`)
	if !bytes.Equal(got, want) {
		t.Fatalf("failed edit reply %x\nwant %x", got, want)
	}
	if len(s.d.mask) != 4 || s.d.mask[3] != m(4) {
		t.Errorf("mask list %v, want the first directive applied", s.d.mask)
	}
}
