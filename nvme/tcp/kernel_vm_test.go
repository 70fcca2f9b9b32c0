package tcp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nhdkit/nhd/internal/testenv"
	"github.com/nhdkit/nhd/internal/vmtest"
	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nvme"
)

// The host NQN and id the guest's nvme-cli uses (given, so that nvme-cli
// needs no /etc/nvme/hostnqn in the initramfs).
const (
	guestHostNQN = "nqn.2014-08.org.nvmexpress:uuid:6c1e2f6a-0d1b-4d5e-9a43-1f2e3d4c5b6a"
	guestHostID  = "6c1e2f6a-0d1b-4d5e-9a43-1f2e3d4c5b6a"
)

// countingBackend counts the flushes and trims that reach the namespace,
// so the test can tell the guest's sync and fstrim got through.
type countingBackend struct {
	*nbd.MemDisk
	flushes, trims atomic.Int64
}

func (c *countingBackend) Flush(ctx context.Context) error {
	c.flushes.Add(1)
	return c.MemDisk.Flush(ctx)
}

func (c *countingBackend) Trim(ctx context.Context, off, length int64) error {
	c.trims.Add(1)
	return c.MemDisk.Trim(ctx, off, length)
}

// TestKernelHost points Linux's NVMe/TCP host (nvme-tcp, driven by
// nvme-cli) in a QEMU guest at this package's Server on the host's
// loopback (10.0.2.2 in the guest): nvme discover lists the subsystem,
// nvme connect makes /dev/nvme0n1, ext4 goes through it (mkfs, files,
// fstrim, sync, e2fsck -f -n, every checksum verified after a remount),
// nvme disconnect; then again with header and data digests to a second
// Server on the same disk whose small in-capsule size makes the kernel
// send its larger writes after an R2T, with direct I/O checked byte for
// byte; then to a third whose backend fails a block's reads and another's
// writes, which the kernel must fail while serving the other blocks.
func TestKernelHost(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a virtual machine")
	}
	nvmeCLI := testenv.Need(t, "nvme", "nvme-cli")
	testenv.Need(t, "mke2fs", "e2fsprogs")
	vm := vmtest.New(t)

	disk := &countingBackend{MemDisk: nbd.NewMemDisk(128 << 20)}
	var fabric *nvme.Fabric // the first Server's
	serve := func(inCap int, backend nbd.Backend) int {
		f := &nvme.Fabric{InCapsuleSize: inCap, Subsystems: []*nvme.Subsystem{{NQN: testNQN, Namespaces: []nvme.Namespace{{Backend: backend}}}}}
		if fabric == nil {
			fabric = f
		}
		srv := &Server{Fabric: f}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go srv.Serve(l)
		t.Cleanup(func() { srv.Close() })
		return l.Addr().(*net.TCPAddr).Port
	}
	// The first target is an NVMe-to-NBD bridge: its namespace is an
	// nbd.Client of an nbd.Server on the disk, so the kernel's reads and
	// writes are started on the client and finished by each queue's
	// worker, its flushes and trims run through the client; the second
	// serves the disk itself.
	port, portR2T := serve(0, nbdBridge(t, disk)), serve(8192, disk)
	bad := &vmtest.FailingBlocks{Inner: nbd.NewMemDisk(1 << 20), ReadBad: 16, WriteBad: 32}
	portBad := serve(0, bad)

	vm.UserNet()
	vm.Module("nvme-tcp")
	vm.Module("crc32c_generic") // the digests' crypto, asked for at connect time
	vm.Program(nvmeCLI)
	who := fmt.Sprintf("-t tcp -a 10.0.2.2 -s %d --hostnqn=%s --hostid=%s", port, guestHostNQN, guestHostID)
	whoR2T := fmt.Sprintf("-t tcp -a 10.0.2.2 -s %d --hostnqn=%s --hostid=%s", portR2T, guestHostNQN, guestHostID)
	whoBad := fmt.Sprintf("-t tcp -a 10.0.2.2 -s %d --hostnqn=%s --hostid=%s", portBad, guestHostNQN, guestHostID)
	waitDev := `i=0
while [ ! -b /dev/nvme0n1 ]; do i=$((i + 1)); [ $i -le 100 ] || exit 1; sleep 0.1; done
cat /sys/block/nvme0n1/size /sys/class/nvme/nvme0/model /sys/class/nvme/nvme0/subsysnqn
echo "cntlid $(cat /sys/class/nvme/nvme0/cntlid)"
`
	vm.Step("discover", nvmeCLI+" discover "+who+"\n").Check = func(t *testing.T, out string) {
		if !strings.Contains(out, "subnqn:  "+testNQN) && !strings.Contains(out, testNQN) {
			t.Errorf("discovery log does not list %s", testNQN)
		}
	}
	var cntlid string
	connect := vm.Step("connect", nvmeCLI+" connect "+who+" -n "+testNQN+"\n"+waitDev)
	connect.Check = func(t *testing.T, out string) {
		if !strings.Contains(out, "262144") {
			t.Errorf("namespace is not 262144 sectors of 512 bytes")
		}
		if i := strings.Index(out, "cntlid "); i >= 0 {
			cntlid = strings.Fields(out[i:])[1]
		}
	}
	// A namespace added at run time reaches the kernel through an
	// Asynchronous Event (Namespace Attribute Changed), which makes it
	// rescan: nvme0n2 appears, then goes when the namespace is removed.
	connect.OnEnd = func() {
		if _, err := fabric.AddNamespace(testNQN, nvme.Namespace{Backend: nbd.NewMemDisk(8 << 20)}); err != nil {
			t.Error(err)
		}
	}
	added := vm.Step("namespace added", `i=0
while [ ! -b /dev/nvme0n2 ]; do i=$((i + 1)); [ $i -le 100 ] || exit 1; sleep 0.1; done
cat /sys/block/nvme0n2/size
`)
	added.Check = func(t *testing.T, out string) {
		if !strings.Contains(out, "16384") {
			t.Errorf("the added namespace is not 16384 sectors")
		}
	}
	added.OnEnd = func() {
		if err := fabric.RemoveNamespace(testNQN, 2); err != nil {
			t.Error(err)
		}
	}
	vm.Step("namespace removed", `i=0
while [ -b /dev/nvme0n2 ]; do i=$((i + 1)); [ $i -le 100 ] || exit 1; sleep 0.1; done
`)
	steps := vm.DiskSteps("ext4", "/dev/nvme0n1", 8, false)
	var trims, flushes int64
	steps.Write.OnEnd = func() { trims, flushes = disk.trims.Load(), disk.flushes.Load() }
	steps.Trim.Check = func(t *testing.T, _ string) {
		if disk.trims.Load() <= trims {
			t.Error("fstrim sent no Dataset Management deallocate")
		}
	}
	steps.Sync.Check = func(t *testing.T, _ string) {
		if disk.flushes.Load() <= flushes {
			t.Error("sync sent no Flush")
		}
	}
	// The kernel's Keep Alives kept the association up all along: the
	// controller is the one connect made (a reconnection makes another).
	vm.Step("same controller", "echo \"cntlid $(cat /sys/class/nvme/nvme0/cntlid)\"\n").Check = func(t *testing.T, out string) {
		if cntlid == "" || !strings.Contains(out, "cntlid "+cntlid+"\n") {
			t.Errorf("controller changed from %q: the association was lost", cntlid)
		}
	}
	vm.Step("disconnect", nvmeCLI+" disconnect -n "+testNQN+"\n")
	vm.Step("digests/connect", nvmeCLI+" connect "+whoR2T+" -n "+testNQN+" --hdr-digest --data-digest\n"+waitDev)
	vm.Step("digests/io", `head -c 4194304 /dev/urandom > /tmp/pattern
dd if=/tmp/pattern of=/dev/nvme0n1 bs=128k seek=64 oflag=direct 2>&1 | tail -1
dd if=/dev/nvme0n1 of=/tmp/back bs=128k skip=64 count=32 iflag=direct 2>&1 | tail -1
cmp /tmp/pattern /tmp/back
sha256sum /tmp/pattern
`)
	vm.Step("digests/disconnect", nvmeCLI+" disconnect -n "+testNQN+"\n")
	// A namespace whose backend fails a block's reads and another's
	// writes: the kernel fails those with errors and serves the rest.
	vm.Step("failing/connect", nvmeCLI+" connect "+whoBad+" -n "+testNQN+"\n"+waitDev)
	vm.FailingBlockStep("failing/errors", "/dev/nvme0n1", bad)
	vm.Step("failing/disconnect", nvmeCLI+" disconnect -n "+testNQN+"\n")
	vm.Run()
	if m := ext4Magic(t, disk); m != 0xEF53 {
		t.Errorf("superblock magic %#04x, want 0xef53", m)
	}
}

func ext4Magic(t *testing.T, b nbd.Backend) uint16 {
	var m [2]byte
	if _, err := b.ReadAt(m[:], 1024+56); err != nil {
		t.Fatal(err)
	}
	return uint16(m[0]) | uint16(m[1])<<8
}

// TestKernelTarget runs Linux's NVMe/TCP target (nvmet-tcp over a brd RAM
// disk, configured through configfs) in a QEMU guest and this package's
// host on the host side, through a QEMU port forward: Discover lists the
// subsystem, Dial connects, and 16 MiB of random writes and reads are
// checked byte for byte, with digests off, then through a proxy that cuts
// every connection mid-transfer (the host reconnects to nvmet and
// re-issues what was in flight), then with digests on. A third namespace,
// a null_blk device with bad sectors, must fail their reads and writes
// with EIO while serving the blocks around them. The guest waits
// until the host writes a marker through NVMe, then checks the marker
// and the data's checksum on its own side.
func TestKernelTarget(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a virtual machine")
	}
	vm := vmtest.New(t)
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := probe.Addr().(*net.TCPAddr).Port
	probe.Close()

	const nqn = "nqn.2026-01.io.nhd:guest"
	proxy := newCutProxy(t, fmt.Sprintf("127.0.0.1:%d", port))
	vm.Module("e1000")
	vm.QEMU("-netdev", fmt.Sprintf("user,id=user0,hostfwd=tcp:127.0.0.1:%d-10.0.2.15:4420", port), "-device", "e1000,netdev=user0")
	vm.Setup("ip link set lo up", "ip link set eth0 up", "ip addr add 10.0.2.15/24 dev eth0")
	vm.Module("brd", "rd_nr=1", "rd_size=65536", "max_part=0")
	vm.Module("null_blk", "nr_devices=0")
	vm.Module("nvmet-tcp")
	vm.Module("crc32c_generic")
	var hostErr error
	var wantSum string // the first 16 MiB as the host left them
	done := make(chan struct{})
	vm.Step("nvmet", `mount -t configfs none /sys/kernel/config
cd /sys/kernel/config/nvmet
mkdir subsystems/`+nqn+`
echo 1 > subsystems/`+nqn+`/attr_allow_any_host
mkdir subsystems/`+nqn+`/namespaces/1
echo -n /dev/ram0 > subsystems/`+nqn+`/namespaces/1/device_path
echo 1 > subsystems/`+nqn+`/namespaces/1/enable
truncate -s 8M /ns2.img
mkdir subsystems/`+nqn+`/namespaces/2
echo -n /ns2.img > subsystems/`+nqn+`/namespaces/2/device_path
echo 1 > subsystems/`+nqn+`/namespaces/2/buffered_io
echo 1 > subsystems/`+nqn+`/namespaces/2/enable
mkdir /sys/kernel/config/nullb/nhdbad
( cd /sys/kernel/config/nullb/nhdbad
  echo 1 > memory_backed; echo 8 > size; echo 512 > blocksize
  echo +128-135 > badblocks; echo 1 > power )
mkdir subsystems/`+nqn+`/namespaces/3
echo -n /dev/nhdbad > subsystems/`+nqn+`/namespaces/3/device_path
echo 1 > subsystems/`+nqn+`/namespaces/3/enable
echo "namespace 3: /dev/nhdbad, null_blk with sectors $(cat /sys/kernel/config/nullb/nhdbad/badblocks) bad"
mkdir ports/1
echo tcp > ports/1/addr_trtype
echo ipv4 > ports/1/addr_adrfam
echo 10.0.2.15 > ports/1/addr_traddr
echo 4420 > ports/1/addr_trsvcid
ln -s /sys/kernel/config/nvmet/subsystems/`+nqn+` ports/1/subsystems/`+nqn+`
echo nvmet ready
`).OnEnd = func() {
		go func() {
			defer close(done)
			begin := time.Now()
			wantSum, hostErr = hostAgainstNvmet(fmt.Sprintf("127.0.0.1:%d", port), nqn, proxy)
			t.Logf("host side done after %v", time.Since(begin).Round(time.Millisecond))
		}()
	}
	// The host writes "DONE" at byte 0 of block 8191 when it is through
	// with namespace 1; the guest then grows namespace 2 (a file), which
	// a host connected to it sees.
	wait := vm.Step("wait for the host", `i=0
while [ "$(dd if=/dev/ram0 bs=512 skip=8191 count=1 2>/dev/null | head -c 4)" != DONE ]; do
  i=$((i + 1)); [ $i -le 240 ] || exit 1; sleep 1
  [ $((i % 20)) != 0 ] || { echo "waited $i s"; dd if=/dev/ram0 bs=512 skip=8191 count=1 | od -c | head -2; }
  echo 1 > /proc/sys/vm/drop_caches
done
echo "marker seen after $i s"
dd if=/dev/ram0 bs=1M count=16 2>/dev/null | sha256sum
truncate -s 16M /ns2.img
echo 1 > /sys/kernel/config/nvmet/subsystems/`+nqn+`/namespaces/2/revalidate_size
echo namespace 2 grown
i=0
while [ "$(dd if=/ns2.img bs=4096 skip=3328 count=1 2>/dev/null | head -c 5)" != ENDED ]; do
  i=$((i + 1)); [ $i -le 120 ] || exit 1; sleep 1
done
echo "the host used namespace 2 past its old end after $i s"
`)
	hostDone := func() bool {
		select {
		case <-done:
			return true
		case <-time.After(time.Minute):
			return false
		}
	}
	wait.Check = func(t *testing.T, out string) {
		if hostDone() && hostErr == nil && !strings.Contains(out, wantSum+"  -") {
			t.Errorf("the guest's sum of the disk is not the host's %s", wantSum)
		}
	}
	vm.Run()
	if !hostDone() {
		t.Fatal("the host side did not finish")
	}
	if hostErr != nil {
		t.Fatal(hostErr)
	}
}

// hostAgainstNvmet is the host side of TestKernelTarget. It returns the
// SHA-256 of the first 16 MiB of the namespace as it left them. Its
// second pass goes through proxy, which cuts every connection now and
// then: the host reconnects to nvmet and re-issues what was in flight.
func hostAgainstNvmet(addr, nqn string, proxy *cutProxy) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var es []nvme.DiscoveryLogEntry
	var err error
	for range 60 { // the port forward answers before nvmet listens
		if es, err = Discover(ctx, addr, nil); err == nil {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		return "", fmt.Errorf("discover: %w", err)
	}
	found := false
	for _, e := range es {
		found = found || e.SubNQN == nqn
	}
	if !found {
		return "", fmt.Errorf("discovery log %+v does not list %s", es, nqn)
	}
	if err := badBlocks(ctx, addr, nqn); err != nil {
		return "", err
	}
	grown, err := watchGrowth(ctx, addr, nqn)
	if err != nil {
		return "", err
	}
	pattern := make([]byte, 16<<20)
	r := rand.New(rand.NewPCG(18, 4))
	for i := range pattern {
		pattern[i] = byte(r.Uint32())
	}
	for _, pass := range []struct{ digests, cut bool }{{false, false}, {false, true}, {true, false}} {
		digests, to := pass.digests, addr
		if pass.cut {
			to = proxy.addr()
		}
		// The delay leaves nvmet, slow in an emulated guest, time to tear
		// the dropped association down, as the kernel host's 10 s does.
		h, err := Dial(ctx, to, nqn, &Config{IOQueues: 2, QueueDepth: 32, HeaderDigest: digests, DataDigest: digests, ReconnectDelay: time.Second, LossTimeout: time.Minute})
		if err != nil {
			return "", fmt.Errorf("dial (digests %v): %w", digests, err)
		}
		if pass.cut { // mid-transfer, a few times in the pass's 64 MiB
			proxy.cutEvery(12<<20, 3)
		}
		err = writeReadVerify(h, pattern)
		if err != nil {
			h.Close()
			return "", fmt.Errorf("digests %v, cut %v: %w", digests, pass.cut, err)
		}
		if pass.cut && resentCount(h) == 0 {
			h.Close()
			return "", fmt.Errorf("%d cuts sent no command again: nothing was cut in flight", proxy.cutCount())
		}
		if digests {
			marker := pattern[8191*512 : 8191*512+h.BlockSize()]
			clear(marker)
			copy(marker, "DONE")
			if _, err := h.WriteAt(marker, 8191*512); err != nil {
				h.Close()
				return "", err
			}
			if err := h.Flush(ctx); err != nil {
				h.Close()
				return "", err
			}
		}
		h.Close()
	}
	if err := <-grown; err != nil {
		return "", err
	}
	return fmt.Sprintf("%x", sha256.Sum256(pattern)), nil
}

// badBlocks connects a host to namespace 3, a null_blk device whose
// sectors 128-135 fail: a read or a write of them fails with EIO (nvmet's
// Internal Error for the block layer's), the blocks around them read and
// write, and the host goes on serving.
func badBlocks(ctx context.Context, addr, nqn string) error {
	h, err := Dial(ctx, addr, nqn, &Config{IOQueues: 1, NSID: 3})
	if err != nil {
		return fmt.Errorf("dial namespace 3: %w", err)
	}
	defer h.Close()
	good := bytes.Repeat([]byte("good"), 1024)
	back := make([]byte, len(good))
	if _, err := h.ReadAt(back, 64<<10); !errors.Is(err, syscall.EIO) {
		return fmt.Errorf("read of namespace 3's bad sectors: %v, want EIO", err)
	}
	if _, err := h.WriteAt(good, 64<<10); !errors.Is(err, syscall.EIO) {
		return fmt.Errorf("write of namespace 3's bad sectors: %v, want EIO", err)
	}
	for _, off := range []int64{60 << 10, 68 << 10} {
		if _, err := h.WriteAt(good, off); err != nil {
			return fmt.Errorf("write beside namespace 3's bad sectors: %w", err)
		}
		if _, err := h.ReadAt(back, off); err != nil || !bytes.Equal(back, good) {
			return fmt.Errorf("read beside namespace 3's bad sectors: %v", err)
		}
	}
	return nil
}

// watchGrowth connects a host to namespace 2 (8 MiB) and returns what it
// finds once the guest has grown it to 16 MiB: nil if the host was told
// (Config.NamespaceChanged) and then wrote and read back a block past the
// old end. Last it writes "ENDED" at 13 MiB, which the guest waits for.
func watchGrowth(ctx context.Context, addr, nqn string) (<-chan error, error) {
	changed := make(chan int64, 4)
	h, err := Dial(ctx, addr, nqn, &Config{IOQueues: 1, NSID: 2, NamespaceChanged: func(size int64) { changed <- size }})
	if err != nil {
		return nil, fmt.Errorf("dial namespace 2: %w", err)
	}
	if h.Size() != 8<<20 {
		h.Close()
		return nil, fmt.Errorf("namespace 2 of %d bytes, want 8 MiB", h.Size())
	}
	out := make(chan error, 1)
	go func() {
		defer h.Close()
		select {
		case size := <-changed:
			if size != 16<<20 || h.Size() != 16<<20 {
				out <- fmt.Errorf("namespace 2 grown to %d, Size %d; want 16 MiB", size, h.Size())
				return
			}
		case <-ctx.Done():
			out <- errors.New("namespace 2 grew and the host was not told")
			return
		}
		block := bytes.Repeat([]byte("grown"), 1024)[:4096]
		back := make([]byte, len(block))
		if _, err := h.WriteAt(block, 12<<20); err != nil {
			out <- fmt.Errorf("write past namespace 2's old end: %w", err)
			return
		}
		if _, err := h.ReadAt(back, 12<<20); err != nil || !bytes.Equal(back, block) {
			out <- fmt.Errorf("read past namespace 2's old end: %v", err)
			return
		}
		clear(block)
		copy(block, "ENDED")
		if _, err := h.WriteAt(block, 13<<20); err != nil {
			out <- fmt.Errorf("write of the end marker: %w", err)
			return
		}
		out <- h.Flush(ctx)
	}()
	return out, nil
}

func writeReadVerify(h *Host, pattern []byte) error {
	// Writes of mixed sizes (in-capsule and through R2T), then reads of
	// other sizes, every byte compared.
	for off, i := 0, 0; off < len(pattern); i++ {
		n := min([]int{4096, 16384, 131072, 1 << 20}[i%4], len(pattern)-off)
		if _, err := h.WriteAt(pattern[off:off+n], int64(off)); err != nil {
			return fmt.Errorf("write %d at %d: %w", n, off, err)
		}
		off += n
	}
	back := make([]byte, len(pattern))
	for off, i := 0, 0; off < len(back); i++ {
		n := min([]int{512 << 10, 4096, 65536}[i%3], len(back)-off)
		if _, err := h.ReadAt(back[off:off+n], int64(off)); err != nil {
			return fmt.Errorf("read %d at %d: %w", n, off, err)
		}
		off += n
	}
	if !bytes.Equal(back, pattern) {
		return fmt.Errorf("data read back differs from what was written")
	}
	return nil
}
