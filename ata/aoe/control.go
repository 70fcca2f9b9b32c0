package aoe

// maxMask and maxReserve are vblade's list sizes.
const (
	maxMask    = 32
	maxReserve = 255
)

// macMask reads or edits d's MAC mask list (AoEr11 3.3). An edit applies
// the directives in order and stops at the first that fails; its reply is
// then the 4-byte argument alone, with merror set and dcnt the index of
// the failing directive, as vblade sends it. Every other reply carries the
// list, dcnt counting its entries.
func (t *Target) macMask(d *Disk, r *request) {
	var m MaskArg
	if err := ParseMaskArg(r.buf, &m); err != nil {
		t.replyError(d, &r.h, ErrBadArgument)
		return
	}
	var merr MaskError
	failed := -1
	switch m.Cmd {
	case MaskRead:
	case MaskEdit:
		failed, merr = d.editMask(m.Directives)
	default:
		t.replyError(d, &r.h, ErrBadArgument)
		return
	}
	if failed >= 0 {
		t.sendArg(d, &r.h, func(b []byte) []byte {
			return append(b, 0, uint8(m.Cmd), uint8(merr), uint8(failed))
		})
		return
	}
	out := MaskArg{Cmd: m.Cmd}
	for _, mac := range d.mask {
		out.Directives = append(out.Directives, Directive{Cmd: DirNone, MAC: mac})
	}
	t.sendArg(d, &r.h, func(b []byte) []byte { b, _ = out.Append(b); return b })
}

func (d *Disk) editMask(dirs []Directive) (failed int, e MaskError) {
	for i, dir := range dirs {
		switch dir.Cmd {
		case DirNone:
		case DirAdd:
			if contains(d.mask, dir.MAC) {
				continue
			}
			if len(d.mask) >= maxMask {
				return i, MaskErrListFull
			}
			d.mask = append(d.mask, dir.MAC)
		case DirDelete:
			for j, x := range d.mask {
				if x == dir.MAC {
					d.mask = append(d.mask[:j], d.mask[j+1:]...)
					break
				}
			}
		default:
			return i, MaskErrBadDirective
		}
	}
	return -1, 0
}

// reserveRelease reads, sets or force-sets d's reservation (AoEr11 3.4):
// a set is refused unless the list is empty or holds the sender.
func (t *Target) reserveRelease(d *Disk, r *request) {
	var a ReserveArg
	if err := ParseReserveArg(r.buf, &a); err != nil {
		t.replyError(d, &r.h, ErrBadArgument)
		return
	}
	switch a.Cmd {
	case ReserveRead:
	case ReserveSet:
		if len(d.reserve) > 0 && !contains(d.reserve, r.h.Src) {
			t.replyError(d, &r.h, ErrTargetReserved)
			return
		}
		d.reserve = append(d.reserve[:0], a.MACs...)
	case ReserveForceSet:
		d.reserve = append(d.reserve[:0], a.MACs...)
	default:
		t.replyError(d, &r.h, ErrBadArgument)
		return
	}
	out := ReserveArg{Cmd: a.Cmd, MACs: d.reserve}
	t.sendArg(d, &r.h, func(b []byte) []byte { b, _ = out.Append(b); return b })
}

// sendArg replies to req with the argument appendArg writes.
func (t *Target) sendArg(d *Disk, req *Header, appendArg func([]byte) []byte) {
	h := *req
	h.Reply(t.mac, d.Shelf, d.Slot)
	b := make([]byte, HeaderSize, t.frameSize)
	h.Put(b)
	b = appendArg(b)
	for len(b) < MinFrameSize {
		b = append(b, 0)
	}
	if err := t.Transport.WriteFrame(b); err != nil {
		t.log("aoe: write", "err", err)
	}
}
