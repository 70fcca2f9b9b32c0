package nbd_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nbd/nbdtest"
)

// extentsTestSize is odd on purpose: the last extent ends mid-chunk.
const extentsTestSize = 1<<20 + 100

// extentsTestFill writes 64 KiB of data at chunks 1, 2 and 5 of b and
// returns the extents the whole disk must then have.
func extentsTestFill(t *testing.T, b nbd.Backend) []nbd.ExtentAt {
	t.Helper()
	const c = nbd.MemDiskChunkSize
	data := make([]byte, c)
	for i := range data {
		data[i] = byte(i*7 + 1)
	}
	for _, i := range []int64{1, 2, 5} {
		if _, err := b.WriteAt(data, i*c); err != nil {
			t.Fatal(err)
		}
	}
	hz := nbd.ExtentHole | nbd.ExtentZero
	return []nbd.ExtentAt{
		{Offset: 0, Length: c, Flags: hz},
		{Offset: c, Length: 2 * c, Flags: 0},
		{Offset: 3 * c, Length: 2 * c, Flags: hz},
		{Offset: 5 * c, Length: c, Flags: 0},
		{Offset: 6 * c, Length: extentsTestSize - 6*c, Flags: hz},
	}
}

func extentsTestWalk(t *testing.T, b nbd.BlockStatuser, off, length int64) []nbd.ExtentAt {
	t.Helper()
	var got []nbd.ExtentAt
	err := nbd.WalkExtents(context.Background(), b, off, length, func(e nbd.ExtentAt) error {
		got = append(got, e)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// extentsTestCut returns the part of want inside [off, off+length).
func extentsTestCut(want []nbd.ExtentAt, off, length int64) []nbd.ExtentAt {
	var out []nbd.ExtentAt
	for _, e := range want {
		lo, hi := max(e.Offset, off), min(e.End(), off+length)
		if lo < hi {
			out = append(out, nbd.ExtentAt{Offset: lo, Length: hi - lo, Flags: e.Flags})
		}
	}
	return out
}

// extentsTestCheck walks the whole disk and a few cut ranges.
func extentsTestCheck(t *testing.T, b nbd.BlockStatuser, want []nbd.ExtentAt) {
	t.Helper()
	for _, r := range [][2]int64{{0, extentsTestSize}, {100, 300 << 10}, {64 << 10, 64 << 10}, {extentsTestSize - 1, 1}, {5, 0}} {
		got := extentsTestWalk(t, b, r[0], r[1])
		if d := cmp.Diff(extentsTestCut(want, r[0], r[1]), got); d != "" {
			t.Errorf("walk [%d, +%d) (-want +got):\n%s", r[0], r[1], d)
		}
	}
}

func TestWalkExtentsMemDisk(t *testing.T) {
	d := nbd.NewMemDisk(extentsTestSize)
	extentsTestCheck(t, d, extentsTestFill(t, d))
}

func TestWalkExtentsClient(t *testing.T) {
	srv := nbdtest.Start(t, nbdtest.WithSize(extentsTestSize))
	c, err := nbd.Dial(context.Background(), srv.URI)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	extentsTestCheck(t, c, extentsTestFill(t, c))
}

// extentsScripted answers each BlockStatus call with the next batch.
type extentsScripted struct {
	batches [][]nbd.Extent
	asked   [][2]int64
}

func (s *extentsScripted) BlockStatus(ctx context.Context, off, length int64, dst []nbd.Extent) ([]nbd.Extent, error) {
	s.asked = append(s.asked, [2]int64{off, length})
	if len(s.batches) == 0 {
		return dst, errors.New("no more batches")
	}
	b := s.batches[0]
	s.batches = s.batches[1:]
	return append(dst, b...), nil
}

func TestWalkExtentsBatches(t *testing.T) {
	h := nbd.ExtentHole | nbd.ExtentZero
	s := &extentsScripted{batches: [][]nbd.Extent{
		{{Length: 10, Flags: 0}, {Length: 5, Flags: 0}},
		{{Length: 20, Flags: 0}, {Length: 7, Flags: h}},
		{{Length: 100, Flags: h}}, // runs past the end: cut
	}}
	got := extentsTestWalk(t, s, 1000, 50)
	want := []nbd.ExtentAt{{Offset: 1000, Length: 15}, {Offset: 1015, Length: 20}, {Offset: 1035, Length: 7, Flags: h}, {Offset: 1042, Length: 8, Flags: h}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("extents (-want +got):\n%s", d)
	}
	if d := cmp.Diff([][2]int64{{1000, 50}, {1015, 35}, {1042, 8}}, s.asked); d != "" {
		t.Errorf("calls (-want +got):\n%s", d)
	}
}

func TestWalkExtentsErrors(t *testing.T) {
	ctx := context.Background()
	nop := func(nbd.ExtentAt) error { return nil }
	for name, batches := range map[string][][]nbd.Extent{
		"empty":       {{}},
		"zero length": {{{Length: 0}}},
	} {
		err := nbd.WalkExtents(ctx, &extentsScripted{batches: batches}, 0, 10, nop)
		if !errors.Is(err, nbd.ErrNoProgress) {
			t.Errorf("%s: err %v, want ErrNoProgress", name, err)
		}
	}
	s := &extentsScripted{batches: [][]nbd.Extent{{{Length: 4}}}}
	err := nbd.WalkExtents(ctx, s, 0, 10, nop)
	if err == nil || err.Error() != "nbd: block status at 4: no more batches" {
		t.Errorf("backend error: %v, want it with its offset", err)
	}
	stop := errors.New("stop")
	d := nbd.NewMemDisk(1 << 20)
	if err := nbd.WalkExtents(ctx, d, 0, 1<<20, func(nbd.ExtentAt) error { return stop }); err != stop {
		t.Errorf("fn error: %v, want it unwrapped", err)
	}
	if err := nbd.WalkExtents(ctx, d, -1, 10, nop); !errors.Is(err, nbd.ErrOutOfRange) {
		t.Errorf("negative offset: %v", err)
	}
	if err := nbd.WalkExtents(ctx, d, 0, 2<<20, nop); err == nil {
		t.Errorf("past the end: no error")
	}
}

func ExampleWalkExtents() {
	d := nbd.NewMemDisk(1 << 20)
	if _, err := d.WriteAt(make([]byte, 100<<10), 128<<10); err != nil {
		log.Fatal(err)
	}
	err := nbd.WalkExtents(context.Background(), d, 0, d.Size(), func(e nbd.ExtentAt) error {
		fmt.Printf("%7d +%7d %v\n", e.Offset, e.Length, e.Flags)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	//       0 + 131072 HOLE|ZERO
	//  131072 + 131072 0
	//  262144 + 786432 HOLE|ZERO
}
