package aoe

import (
	"testing"
)

// FuzzTarget hands arbitrary frames to a target's dispatcher and runs any
// ATA command on the reading goroutine (one ATA host): nothing may panic, and
// every frame the target sends must be a well-formed reply to the request
// (R set, the request's tag, the target's own address, at least 60 bytes).
func FuzzTarget(f *testing.F) {
	f.Fuzz(func(t *testing.T, frame []byte) {
		st, _ := newSyncTarget(t, 64)
		out := st.do(frame)
		var req Header
		for _, out := range out {
			var h Header
			if ParseHeader(frame, &req) != nil || ParseHeader(out, &h) != nil {
				t.Fatalf("reply %x to a frame that does not parse", out)
			}
			if !h.Flags.Has(FlagResponse) || h.Tag != req.Tag || h.Major != 0 || h.Minor != 1 || h.Src != targetMAC || h.Dst != req.Src || len(out) < MinFrameSize {
				t.Fatalf("reply %+v (%d bytes) to %+v", h, len(out), req)
			}
		}
	})
}
