package ata_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nhdkit/nhd/ata"
	"github.com/nhdkit/nhd/internal/allocs"
)

// execErrSectors is the capacity of the device of the ExecErr tests:
// below one cylinder of its default CHS geometry (16 heads, 63 sectors),
// so a CHS address past its end can still be written in the registers.
const execErrSectors = 500

// failingCommands end in error on newExecErrRig's device, one per
// addressing mode and kind of error; is is the sentinel the error
// matches, lba the LBA it reports, and backend says whether it comes from
// the backend (a test memDisk's bad sector, whose lookup allocates).
var failingCommands = []struct {
	name    string
	cmd     ata.Command
	is      error
	lba     uint64
	backend bool
}{
	{"LBA28 PIO read past the end", ata.Command{Op: ata.CmdReadSectors, Addressing: ata.AddrLBA28, LBA: 490, Count: 16}, ata.ErrIDNotFound, 500, false},
	{"LBA48 DMA read past the end", ata.Command{Op: ata.CmdReadDMAExt, Addressing: ata.AddrLBA48, LBA: 5000, Count: 1}, ata.ErrIDNotFound, 5000, false},
	{"CHS PIO write past the end", ata.Command{Op: ata.CmdWriteSectors, Addressing: ata.AddrCHS, LBA: 600, Count: 1}, ata.ErrIDNotFound, 600, false},
	{"non-data NOP", ata.Command{Op: ata.CmdNOP}, ata.ErrAborted, 0, false},
	{"CHS read of a bad sector", ata.Command{Op: ata.CmdReadSectors, Addressing: ata.AddrCHS, LBA: 30, Count: 16}, ata.ErrUncorrectable, 37, true},
	{"LBA48 DMA write of a bad sector", ata.Command{Op: ata.CmdWriteDMAExt, Addressing: ata.AddrLBA48, LBA: 32, Count: 16}, ata.ErrDeviceFault, 40, true},
}

// newExecErrRig is newRig over execErrSectors sectors, sector 37
// unreadable and sector 40 unwritable.
func newExecErrRig(t *testing.T) *rig {
	r := newRig(t, testInfo(execErrSectors))
	r.disk.badRead[37] = true
	r.disk.badWrite[40] = true
	return r
}

// ExecErr reports a command the device ends in error as Exec does, in the
// caller's Error: the same Op, Status, Err and LBA, the same message and
// sentinel, and the error it returns is e itself.
func TestExecErr(t *testing.T) {
	r := newExecErrRig(t)
	for _, tc := range failingCommands {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.cmd
			buf := make([]byte, c.Bytes(512))
			want := ataErr(t, r.host.Exec(&c, buf))
			if want.LBA != tc.lba {
				t.Errorf("Exec: %v, want LBA %d", want, tc.lba)
			}
			e := &ata.Error{Op: 0xFF, Status: 0xFF, Err: 0xFF, LBA: 1 << 47} // overwritten
			err := r.host.ExecErr(&c, buf, e)
			var got *ata.Error
			if !errors.As(err, &got) || got != e {
				t.Fatalf("ExecErr returned %v (%T), want the caller's *Error", err, err)
			}
			if diff := cmp.Diff(want, e); diff != "" {
				t.Errorf("ExecErr's Error against Exec's (-Exec +ExecErr):\n%s", diff)
			}
			if !errors.Is(err, tc.is) || err.Error() != want.Error() {
				t.Errorf("ExecErr: %v, want %v matching %v", err, want, tc.is)
			}
		})
	}
}

// ExecErr leaves e alone unless the device ends the command in error:
// success, and an error of the host driver's own, leave it as it was.
func TestExecErrLeavesError(t *testing.T) {
	r := newExecErrRig(t)
	keep := ata.Error{Op: ata.CmdNOP, Status: ata.StatusERR, Err: ata.ErrorABRT, LBA: 7}
	e := keep
	read := ata.Command{Op: ata.CmdReadSectors, Addressing: ata.AddrLBA28, LBA: 0, Count: 1}
	if err := r.host.ExecErr(&read, make([]byte, 512), &e); err != nil || e != keep {
		t.Errorf("a read that succeeds: %v, Error %+v, want nil and %+v", err, e, keep)
	}
	if err := r.host.ExecErr(&read, make([]byte, 511), &e); !errors.Is(err, ata.ErrBufferSize) || e != keep {
		t.Errorf("a short buffer: %v, Error %+v, want ErrBufferSize and %+v", err, e, keep)
	}
}

// Exec's errors stay the caller's to keep: each call returns a new *Error,
// and a later failing command does not change an earlier one's.
func TestExecNewError(t *testing.T) {
	r := newExecErrRig(t)
	a, b := failingCommands[0].cmd, failingCommands[1].cmd
	first := ataErr(t, r.host.Exec(&a, make([]byte, a.Bytes(512))))
	kept := *first
	second := ataErr(t, r.host.Exec(&b, make([]byte, b.Bytes(512))))
	if first == second || *first != kept {
		t.Errorf("second Exec reused the first's Error: %p %+v, %p %+v", first, *first, second, *second)
	}
}

// A command the device ends in error costs ExecErr no allocation, in
// every addressing mode and protocol (the backend's errors are left out:
// the test memDisk allocates to find a bad sector).
func TestExecErrAllocs(t *testing.T) {
	r := newExecErrRig(t)
	var e ata.Error
	for _, tc := range failingCommands {
		if tc.backend {
			continue
		}
		c := tc.cmd
		buf := make([]byte, c.Bytes(512))
		n := allocs.PerRun(1000, func() {
			if err := r.host.ExecErr(&c, buf, &e); !errors.Is(err, tc.is) {
				t.Fatalf("%s: %v, want %v", tc.name, err, tc.is)
			}
		})
		if n > allocs.Slack {
			t.Errorf("%s: %v allocations per command, want 0", tc.name, n)
		}
	}
}
