package nbd_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/nhdkit/nhd/internal/testenv"
	"github.com/nhdkit/nhd/internal/vmtest"
	"github.com/nhdkit/nhd/nbd"
)

// countingDisk is a Backend that counts the trims and flushes the server
// passes down, so the test can tell that the guest's fstrim and sync
// reached the storage.
type countingDisk struct {
	inner interface {
		nbd.Backend
		nbd.Flusher
		nbd.Trimmer
	}
	trims, flushes, writes atomic.Int64
}

func (c *countingDisk) ReadAt(p []byte, off int64) (int, error) { return c.inner.ReadAt(p, off) }
func (c *countingDisk) Size() int64                             { return c.inner.Size() }

func (c *countingDisk) WriteAt(p []byte, off int64) (int, error) {
	c.writes.Add(1)
	return c.inner.WriteAt(p, off)
}

func (c *countingDisk) Flush(ctx context.Context) error {
	c.flushes.Add(1)
	return c.inner.Flush(ctx)
}

func (c *countingDisk) Trim(ctx context.Context, off, length int64) error {
	c.trims.Add(1)
	return c.inner.Trim(ctx, off, length)
}

// ext4Magic reads the superblock magic (0xEF53 at byte 1024+56) from the
// backend.
func ext4Magic(t *testing.T, b nbd.Backend) uint16 {
	var m [2]byte
	if _, err := b.ReadAt(m[:], 1024+56); err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint16(m[:])
}

// TestKernelClient puts Linux's NBD client (nbd.ko driven by nbd-client)
// in a QEMU guest on a memory export and a file export of nbd.Server, and
// QEMU's NBD client behind its IDE disk (Linux's libata on top) on a third
// export, and runs a filesystem through each: ext4, data and metadata, fstrim (TRIM
// must reach the backend), sync (FLUSH must), unmount, e2fsck -f -n clean,
// every file's checksum verified after a remount; and a fourth export whose
// backend fails a block's reads and another's writes, which the kernel's
// block device must report as I/O errors while serving the other blocks.
func TestKernelClient(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a virtual machine")
	}
	nbdClient := testenv.Need(t, "nbd-client", "nbd-client")
	testenv.Need(t, "mke2fs", "e2fsprogs")
	vm := vmtest.New(t)

	const size = 128 << 20
	f, err := os.Create(filepath.Join(t.TempDir(), "disk.img"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	fd, err := nbd.NewFileDisk(f)
	if err != nil {
		t.Fatal(err)
	}
	disks := map[string]*countingDisk{
		"mem":  {inner: nbd.NewMemDisk(size)},
		"file": {inner: fd},
		"ide":  {inner: nbd.NewMemDisk(size)},
	}
	bad := &vmtest.FailingBlocks{Inner: nbd.NewMemDisk(1 << 20), ReadBad: 16, WriteBad: 32}
	srv := &nbd.Server{Exports: []nbd.Export{
		{Name: "mem", Backend: disks["mem"]},
		{Name: "file", Backend: disks["file"]},
		{Name: "ide", Backend: disks["ide"]},
		{Name: "bad", Backend: bad},
	}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	port := l.Addr().(*net.TCPAddr).Port

	vm.UserNet()
	vm.Module("nbd", "nbds_max=4")
	vm.Program(nbdClient)
	// QEMU's own NBD client holds the "ide" export as the primary master
	// of the PIIX IDE controller, which Linux's libata drives.
	vm.QEMU("-drive", fmt.Sprintf("file=nbd:127.0.0.1:%d:exportname=ide,if=ide,format=raw,discard=unmap,cache=writeback", port))
	vm.Module("ata_piix")
	vm.Module("sd_mod")
	for i, name := range []string{"mem", "file", "ide"} {
		dev := fmt.Sprintf("/dev/nbd%d", i)
		if name == "ide" {
			dev = "/dev/sda"
			vm.Step(name+"/probe", `i=0
while [ ! -b /dev/sda ]; do i=$((i + 1)); [ $i -le 100 ] || exit 1; sleep 0.1; done
cat /sys/block/sda/device/model /sys/block/sda/size /sys/block/sda/queue/discard_max_bytes
`)
		} else {
			vm.Step(name+"/connect", fmt.Sprintf(nbdClient+" -N %s 10.0.2.2 %d %s -b 4096\ncat /sys/block/nbd%d/size\n", name, port, dev, i))
		}
		c := disks[name]
		steps := vm.DiskSteps(name, dev, 8, false)
		var trimsBefore, trimsAfter, flushesBefore, flushesAfter int64
		steps.Write.OnEnd = func() { trimsBefore, flushesBefore = c.trims.Load(), c.flushes.Load() }
		steps.Trim.OnEnd = func() { trimsAfter = c.trims.Load() }
		steps.Trim.Check = func(t *testing.T, _ string) {
			if trimsAfter <= trimsBefore {
				t.Errorf("fstrim sent no TRIM to the backend (%d before, %d after)", trimsBefore, trimsAfter)
			}
		}
		steps.Sync.OnEnd = func() { flushesAfter = c.flushes.Load() }
		steps.Sync.Check = func(t *testing.T, _ string) {
			if flushesAfter <= flushesBefore {
				t.Errorf("sync sent no FLUSH to the backend (%d before the trim step, %d after sync)", flushesBefore, flushesAfter)
			}
		}
		if name != "ide" {
			vm.Step(name+"/disconnect", nbdClient+" -d "+dev)
		}
	}
	// A failing backend: the kernel's block device fails those blocks'
	// reads and writes with EIO and goes on serving the others.
	vm.Step("bad/connect", fmt.Sprintf(nbdClient+" -N bad 10.0.2.2 %d /dev/nbd3 -b 4096\n", port))
	vm.FailingBlockStep("bad/errors", "/dev/nbd3", bad)
	vm.Step("bad/disconnect", nbdClient+" -d /dev/nbd3")
	vm.Run()
	for name, c := range disks {
		if m := ext4Magic(t, c); m != 0xEF53 {
			t.Errorf("%s export: superblock magic %#04x, want 0xef53", name, m)
		}
		t.Logf("%s export: %d writes, %d trims, %d flushes", name, c.writes.Load(), c.trims.Load(), c.flushes.Load())
	}
}
