package aoe_test

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nhdkit/nhd/ata"
	"github.com/nhdkit/nhd/ata/aoe"
	"github.com/nhdkit/nhd/internal/testenv"
	"github.com/nhdkit/nhd/internal/vmtest"
	"github.com/nhdkit/nhd/nbd"
)

// The AoE wires carry jumbo frames: 17 sectors per frame instead of 2,
// so the emulated guest spends far less time per MiB.
const (
	aoeMTU     = 9000
	guestMAC   = "52:54:00:12:34:56"
	vmDiskSize = 128 << 20
)

// vbladePairs is how many times TestKernelInitiatorVsVblade runs each
// target's dd write and read, alternating the targets.
var vbladePairs = flag.Int("aoe.pairs", 4, "dd runs per target in TestKernelInitiatorVsVblade")

// targetBufcnt is the buffer count both targets advertise in
// TestKernelInitiatorVsVblade (vblade's -b, examples/aoe-target's -bufcnt;
// 0: their default, 16 for both).
var targetBufcnt = flag.Int("aoe.bufcnt", 0, "the buffer count vblade (-b) and examples/aoe-target (-bufcnt) advertise in TestKernelInitiatorVsVblade (0: their default, 16)")

// guestNIC is the guest's network adapter in TestKernelInitiatorVsVblade:
// virtio-net, whose emulation costs the guest far less per frame than
// QEMU's e1000 (the other AoE tests' adapter), so that the guest's dd
// rates depend more on the targets.
var guestNIC = flag.String("aoe.nic", "virtio", "the guest's adapter in TestKernelInitiatorVsVblade: e1000 or virtio")

// nicDevice returns the QEMU -device of the adapter nic on netdev id, and
// the guest modules it needs.
func nicDevice(nic, id string) (device string, modules []string, err error) {
	switch nic {
	case "e1000":
		return "e1000,netdev=" + id + ",mac=" + guestMAC, []string{"e1000"}, nil
	case "virtio":
		return "virtio-net-pci,netdev=" + id + ",mac=" + guestMAC, []string{"virtio_pci", "virtio_net"}, nil
	}
	return "", nil, fmt.Errorf("-aoe.nic %q: want e1000 or virtio", nic)
}

// aoeGuest gives vm the aoe driver on eth0, whose adapter's modules
// (nicDevice) it loads first, dd and the filesystem tools.
func aoeGuest(vm *vmtest.VM, nicModules ...string) {
	for _, m := range nicModules {
		vm.Module(m)
	}
	vm.Module("aoe", "aoe_iflist=eth0")
	vm.Program("/usr/bin/dd")
	vm.Setup(fmt.Sprintf("ip link set eth0 mtu %d", aoeMTU), "ip link set eth0 up")
}

// addDiscover adds the guest step that waits for the AoE disk dev: its
// device node and its directory in sysfs (once, in CI, the node was there
// and the directory not yet, or no longer: the loop waits for both, and
// says which is missing if it gives up).
func addDiscover(vm *vmtest.VM, label, dev string) {
	vm.Step(label+"/discover", fmt.Sprintf(`i=0
sys=/sys/block/etherd\!%[2]s
while [ ! -b %[1]s ] || [ ! -d $sys ]; do
  i=$((i + 1))
  [ $i -le 150 ] || { ls -l /dev/etherd /sys/block; cat /dev/etherd/err & sleep 1; kill $!; exit 1; }
  echo > /dev/etherd/discover
  sleep 0.2
done
echo "found after $i tries"
cd $sys
echo "state $(cat state) payload $(cat payload) firmware $(cat firmware-version) size $(cat size)"
`, dev, filepath.Base(dev)))
}

// addDD adds a guest step that writes (zeroes) or reads mib MiB of dev
// with O_DIRECT in 1 MiB blocks, and records its rate for target.
func addDD(vm *vmtest.VM, name, target, dev string, dir ddDir, mib int, r *ddRates) {
	script := fmt.Sprintf("/usr/bin/dd if=/dev/zero of=%s bs=1M count=%d oflag=direct 2>&1 | tail -1\n", dev, mib)
	if dir == ddRead {
		script = fmt.Sprintf("/usr/bin/dd if=%s of=/dev/null bs=1M count=%d iflag=direct 2>&1 | tail -1\n", dev, mib)
	}
	vm.Step(name, script).Check = r.record(target, dir)
}

// addTargetSteps adds the guest script run against one AoE disk: find
// it, dd a raw write and read, then the filesystem steps.
func addTargetSteps(vm *vmtest.VM, label, dev string, r *ddRates) vmtest.Disk {
	addDiscover(vm, label, dev)
	addDD(vm, label+"/dd-write", label, dev, ddWrite, 16, r)
	addDD(vm, label+"/dd-read", label, dev, ddRead, 16, r)
	return vm.DiskSteps(label, dev, 8, true)
}

func needVMTools(t *testing.T) {
	testenv.Need(t, "mke2fs", "e2fsprogs")
	testenv.Need(t, "dd", "coreutils")
}

func ext4Magic(t *testing.T, r io.ReaderAt) uint16 {
	var m [2]byte
	if _, err := r.ReadAt(m[:], 1024+56); err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint16(m[:])
}

// TestKernelInitiator puts Linux's aoe driver in a QEMU guest whose NIC is
// a -netdev dgram socket, and serves it two disks from a Target in this
// process: e0.1 on a file, its commands run on the reading goroutine (one
// ATA host), e0.2 on an NBD export, on four workers (host → AoE → ATA device
// → NBD client → nbd.Server). Each gets the guest's raw dd and the
// filesystem steps (ext4, e2fsck -f -n clean, checksums). A third, e0.3,
// has a backend that fails a block's reads and another's writes: the
// guest's block device must fail them with I/O errors and serve the rest.
func TestKernelInitiator(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a virtual machine")
	}
	needVMTools(t)
	vm := vmtest.New(t)
	f, err := os.Create(filepath.Join(t.TempDir(), "e0.1.img"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(vmDiskSize); err != nil {
		t.Fatal(err)
	}
	mem := nbd.NewMemDisk(vmDiskSize)
	client := nbdExport(t, mem)
	info := func(serial string) ata.DeviceInfo {
		return ata.DeviceInfo{Model: "NHD AoE VM test", Serial: serial, Firmware: "t", Sectors: vmDiskSize / 512, WriteCache: true}
	}
	fileDisk, err := aoe.NewDisk(0, 1, info("e0.1"), f, 1) // run on the reading goroutine
	if err != nil {
		t.Fatal(err)
	}
	nbdDisk, err := aoe.NewDisk(0, 2, info("e0.2"), client, 4)
	if err != nil {
		t.Fatal(err)
	}
	bad := &vmtest.FailingBlocks{Inner: nbd.NewMemDisk(1 << 20), ReadBad: 16, WriteBad: 32}
	badInfo := info("e0.3")
	badInfo.Sectors = 1 << 20 / 512
	badDisk, err := aoe.NewDisk(0, 3, badInfo, bad, 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := testenv.SocketDir(t)
	tpath, qpath := filepath.Join(dir, "target"), filepath.Join(dir, "qemu")
	tr, err := aoe.ListenUnixgram(tpath, qpath, aoe.MAC{0x02, 0, 0x4E, 0x48, 0, 0}, aoeMTU)
	if err != nil {
		t.Fatal(err)
	}
	target := &aoe.Target{Transport: tr, Disks: []*aoe.Disk{fileDisk, nbdDisk, badDisk}}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- target.Serve(ctx) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()

	dev, mods, err := nicDevice("e1000", "aoe0")
	if err != nil {
		t.Fatal(err)
	}
	aoeGuest(vm, mods...)
	vm.QEMU("-netdev", fmt.Sprintf("dgram,id=aoe0,local.type=unix,local.path=%s,remote.type=unix,remote.path=%s", qpath, tpath),
		"-device", dev)
	var r ddRates
	addTargetSteps(vm, "nhd-file", "/dev/etherd/e0.1", &r)
	addTargetSteps(vm, "nhd-nbd", "/dev/etherd/e0.2", &r)
	addDiscover(vm, "nhd-failing", "/dev/etherd/e0.3")
	vm.FailingBlockStep("nhd-failing/errors", "/dev/etherd/e0.3", bad)
	vm.Run()
	t.Log(r.table("guest dd, 16 MiB, O_DIRECT, 1 MiB blocks, one run each"))
	if m := ext4Magic(t, f); m != 0xEF53 {
		t.Errorf("file: superblock magic %#04x", m)
	}
	if m := ext4Magic(t, mem); m != 0xEF53 {
		t.Errorf("NBD export: superblock magic %#04x", m)
	}
}

// nbdExport serves backend with nbd.Server on a unix socket and returns a
// client of it.
func nbdExport(t *testing.T, backend nbd.Backend) *nbd.Client {
	sock := testenv.SocketPath(t, "nbd.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &nbd.Server{Exports: []nbd.Export{{Name: "aoe", Backend: backend}}}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	c, err := nbd.Dial(context.Background(), "nbd+unix:///aoe?socket="+sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestKernelInitiatorVsVblade runs the same guest script against vblade
// (the reference target, e0.3) and examples/aoe-target (e0.4), both on
// files, both on one tap device in a network namespace the test creates,
// the guest on a virtio-net adapter (-aoe.nic), and logs their dd rates
// side by side. It needs root.
func TestKernelInitiatorVsVblade(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a virtual machine")
	}
	dev, mods, err := nicDevice(*guestNIC, "aoe0")
	if err != nil {
		t.Fatal(err)
	}
	needVMTools(t)
	vblade := testenv.Need(t, "vblade", "vblade")
	ip := testenv.Need(t, "ip", "iproute2")
	vm := vmtest.New(t)
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "a tap device in a new network namespace needs root")
	}
	ns := fmt.Sprintf("nhd-aoe-%d", os.Getpid())
	testenv.Run(t, 10*time.Second, ip, "netns", "add", ns)
	t.Cleanup(func() { testenv.RunErr(10*time.Second, ip, "netns", "del", ns) })
	inNS := func(args ...string) []string { return append([]string{ip, "netns", "exec", ns}, args...) }
	for _, c := range [][]string{
		{"ip", "tuntap", "add", "dev", "tap0", "mode", "tap"},
		{"ip", "link", "set", "lo", "up"},
		{"ip", "link", "set", "tap0", "mtu", fmt.Sprint(aoeMTU)},
		{"ip", "link", "set", "tap0", "up"},
	} {
		a := inNS(c...)
		testenv.Run(t, 10*time.Second, a[0], a[1:]...)
	}
	dir := t.TempDir()
	bin := testenv.Build(t, "../../examples/aoe-target")
	files := map[string]string{}
	for _, n := range []string{"vblade", "nhd"} {
		files[n] = filepath.Join(dir, n+".img")
		if err := os.WriteFile(files[n], nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(files[n], vmDiskSize); err != nil {
			t.Fatal(err)
		}
	}
	a := inNS(vblade)
	if *targetBufcnt != 0 {
		a = append(a, "-b", fmt.Sprint(*targetBufcnt))
	}
	a = append(a, "0", "3", "tap0", files["vblade"])
	testenv.Start(t, a[0], a[1:]...)
	a = inNS(bin, "-iface", "tap0", "-shelf", "0", "-slot", "4", "-file", files["nhd"])
	if *targetBufcnt != 0 {
		a = append(a, "-bufcnt", fmt.Sprint(*targetBufcnt))
	}
	testenv.Start(t, a[0], a[1:]...)

	vm.Wrap(inNS()...)
	aoeGuest(vm, mods...)
	vm.QEMU("-netdev", "tap,id=aoe0,ifname=tap0,script=no,downscript=no", "-device", dev)
	var r ddRates
	addCompareSteps(vm, &r, *vbladePairs, [2]string{"vblade", "/dev/etherd/e0.3"}, [2]string{"aoe-target", "/dev/etherd/e0.4"})
	vm.Run()
	bufcnt := *targetBufcnt
	if bufcnt == 0 {
		bufcnt = aoe.DefaultBufferCount
	}
	t.Log(r.table(fmt.Sprintf("guest dd, %d MiB, O_DIRECT, 1 MiB blocks, %d runs each, alternating, %s adapter, buffer count %d", compareMiB, *vbladePairs, *guestNIC, bufcnt)))
	for n, p := range files {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		if m := ext4Magic(t, f); m != 0xEF53 {
			t.Errorf("%s: superblock magic %#04x", n, m)
		}
		f.Close()
	}
}

// compareMiB is the size of each dd of TestKernelInitiatorVsVblade.
const compareMiB = 64

// addCompareSteps adds the steps that compare targets a and b (label,
// device): both discovered, then pairs rounds of a dd write of each and a
// dd read of each, the order of the two swapped every round so that
// neither always runs first, then the filesystem steps once on each.
func addCompareSteps(vm *vmtest.VM, r *ddRates, pairs int, a, b [2]string) {
	addDiscover(vm, a[0], a[1])
	addDiscover(vm, b[0], b[1])
	for i := range pairs {
		order := [2][2]string{a, b}
		if i%2 == 1 {
			order = [2][2]string{b, a}
		}
		for _, dir := range []ddDir{ddWrite, ddRead} {
			for _, tg := range order {
				addDD(vm, fmt.Sprintf("dd%d/%s-%s", i+1, tg[0], dir), tg[0], tg[1], dir, compareMiB, r)
			}
		}
	}
	vm.DiskSteps(a[0], a[1], 8, true)
	vm.DiskSteps(b[0], b[1], 8, true)
}
