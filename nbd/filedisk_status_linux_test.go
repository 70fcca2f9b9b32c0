package nbd

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/nhdkit/nhd/internal/testenv"
	"golang.org/x/sys/unix"
)

// fileDiskFragmented makes a sparse file of holes data blocks, each of
// 4 KiB, each followed by a 4 KiB hole, and checks that the file system
// reports the holes (the test is void otherwise).
func fileDiskFragmented(t *testing.T, holes int) (*FileDisk, *atomic.Int64) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fragmented")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	const step = 8192
	if err := f.Truncate(int64(holes) * step); err != nil {
		t.Fatal(err)
	}
	for i := range int64(holes) {
		if _, err := f.WriteAt([]byte{0xda}, i*step); err != nil {
			t.Fatal(err)
		}
	}
	d, err := NewFileDisk(f)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if off, err := unix.Seek(d.fd, 0, unix.SEEK_HOLE); err != nil || off != 4096 {
		testenv.Unavailable(t, "the file system under %s does not report 4 KiB holes (SEEK_HOLE gave %d, %v)", path, off, err)
	}
	seeks := new(atomic.Int64)
	d.seek = func(fd int, off int64, whence int) (int64, error) {
		seeks.Add(1)
		return unix.Seek(fd, off, whence)
	}
	return d, seeks
}

// fileDiskCheckAlternating checks that ext describes the fragmented file
// from off: data and holes of 4 KiB in turn.
func fileDiskCheckAlternating(t *testing.T, ext []Extent, off int64) {
	t.Helper()
	for i, e := range ext {
		hole := (off/4096+int64(i))%2 == 1
		want := Extent{Length: 4096}
		if hole {
			want.Flags = ExtentHole | ExtentZero
		}
		if e != want {
			t.Fatalf("extent %d from %d is %+v, want %+v", i, off, e, want)
		}
	}
}

// Issue 17 item 6: on a file of 100,000 holes one BlockStatus call walks
// at most what its reply holds, not the whole range.
func TestFileDiskBlockStatusBoundedSeeks(t *testing.T) {
	const holes = 100_000
	d, seeks := fileDiskFragmented(t, holes)
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		off, n   int64
		extents  int // want
		maxSeeks int64
	}{
		{"whole file", 0, d.Size(), fileDiskMaxExtents, fileDiskMaxExtents + 1},
		{"1 GiB window from a hole", 4096, min(1<<30, d.Size()-4096), fileDiskMaxExtents, fileDiskMaxExtents + 1},
		{"small range", 8192, 5 * 4096, 5, 6},
		{"tail", d.Size() - 3*4096, 3 * 4096, 3, 4},
	} {
		seeks.Store(0)
		ext, err := d.BlockStatus(ctx, tc.off, tc.n, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(ext) != tc.extents {
			t.Errorf("%s: %d extents, want %d", tc.name, len(ext), tc.extents)
		}
		fileDiskCheckAlternating(t, ext, tc.off)
		if got := seeks.Load(); got > tc.maxSeeks {
			t.Errorf("%s: %d seeks for %d extents, want at most %d", tc.name, got, len(ext), tc.maxSeeks)
		}
	}
	// Appending to a slice that already holds extents: the budget is per
	// call, and the earlier extents stay.
	prev := []Extent{{Length: 1}}
	ext, err := d.BlockStatus(ctx, 0, d.Size(), prev)
	if err != nil || len(ext) != 1+fileDiskMaxExtents || ext[0] != prev[0] {
		t.Fatalf("appended %d extents after one (%v)", len(ext)-1, err)
	}
}

// The same through the server: a BLOCK_STATUS of the whole file and a structured
// read of 32 MiB over the fragmented file each cost a bounded number of
// seeks, and the block status reply describes the file correctly as far
// as it goes.
func TestServerFileDiskBlockStatusBoundedSeeks(t *testing.T) {
	d, seeks := fileDiskFragmented(t, 100_000)
	path := serverTestStart(t, &Server{Exports: []Export{{Backend: d}}})
	c := serverTestDial(t, path)
	c.negotiate("", true, true)

	seeks.Store(0)
	c.request(CmdBlockStatus, 0, 1, 4096, uint32(d.Size()-4096), nil)
	cs := c.chunks()
	if len(cs) != 1 || cs[0].Type != ChunkBlockStatus {
		t.Fatalf("block status reply: %+v", cs)
	}
	_, ext, err := ParseBlockStatus(cs[0].payload, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ext) == 0 || len(ext) > serverMaxExtents {
		t.Fatalf("%d extents in one reply", len(ext))
	}
	fileDiskCheckAlternating(t, ext, 4096)
	if got := seeks.Load(); got > serverMaxExtents+1 {
		t.Errorf("one BLOCK_STATUS cost %d seeks for a reply of %d extents", got, len(ext))
	}

	seeks.Store(0)
	const n = DefaultMaxPayload
	c.request(CmdRead, 0, 2, 0, n, nil)
	data, _, err := serverTestAssemble(t, c.chunks(), 0, n)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i += 4096 {
		want := byte(0)
		if i%8192 == 0 {
			want = 0xda
		}
		if data[i] != want {
			t.Fatalf("read byte %d is %#x, want %#x", i, data[i], want)
		}
	}
	if got := seeks.Load(); got > serverMaxExtents+1 {
		t.Errorf("one 32 MiB READ cost %d seeks", got)
	}
}
