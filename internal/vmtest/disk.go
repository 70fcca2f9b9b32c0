package vmtest

import (
	"fmt"
	"strings"
)

// Disk is the guest steps DiskSteps adds for one block device, so that a
// test can hang host-side checks (OnEnd, Check) on them.
type Disk struct {
	Mkfs, Write, Trim, Sync, Unmount, Fsck, Verify *Step
}

// DiskSteps adds the steps that put a filesystem through a block device
// the guest sees at dev (for example /dev/nbd0), each step named
// name+"/"+what:
//
//	mkfs     ext4 with metadata checksums (e2fsprogs' mke2fs, not busybox's)
//	write    mount, a bigMiB file of random bytes, 200 small files of
//	         assorted sizes in a directory tree and a symbolic link; their
//	         SHA-256 sums kept in the guest's /tmp
//	trim     delete half the small files and run fstrim on the mount
//	sync     sync the filesystem (a cache flush reaches the device)
//	unmount  unmount, flush the device's buffers, drop the page cache
//	fsck     e2fsck -f -n: the filesystem must be clean
//	verify   mount read-only and check every remaining file's sum
//
// The programs, /etc/mke2fs.conf and the ext4 module are added to the
// guest.
//
// A device without discard support (Linux's aoe driver) passes noDiscard:
// the trim step then deletes the files without running fstrim.
func (vm *VM) DiskSteps(name, dev string, bigMiB int, noDiscard bool) Disk {
	vm.t.Helper()
	vm.Module("ext4")
	vm.Program("/usr/sbin/mke2fs", "/usr/sbin/e2fsck")
	vm.HostFile("/etc/mke2fs.conf")
	mnt := "/mnt/" + strings.ReplaceAll(name, "/", "_")
	sums := "/tmp/" + strings.ReplaceAll(name, "/", "_") + ".sha256"
	step := func(what, script string) *Step { return vm.Step(name+"/"+what, script) }
	return Disk{
		Mkfs: step("mkfs", fmt.Sprintf("/usr/sbin/mke2fs -F -q -t ext4 -O metadata_csum -E nodiscard %s\n", dev)),
		Write: step("write", fmt.Sprintf(`mkdir -p %[1]s
mount -t ext4 %[2]s %[1]s
cd %[1]s
dd if=/dev/urandom of=big bs=1M count=%[3]d 2>&1 | tail -1
for d in 0 1 2 3 4 5 6 7 8 9; do mkdir -p tree/$d; done
i=0
while [ $i -lt 200 ]; do
  head -c $(( (i * 7919) %% 70000 + 1 )) /dev/urandom > tree/$((i %% 10))/f$i
  i=$((i + 1))
done
ln -s tree/3/f3 link
find . -type f | sort | xargs sha256sum > %[4]s
wc -l < %[4]s
df -k %[1]s | tail -1
`, mnt, dev, bigMiB, sums)),
		Trim: step("trim", fmt.Sprintf(`cd %[1]s
find tree -name 'f*[02468]' | xargs rm
grep -v -E 'tree/./f[0-9]*[02468]$' %[2]s > %[2]s.kept
mv %[2]s.kept %[2]s
%[3]sfstrim -v %[1]s
`, mnt, sums, map[bool]string{true: "# no discard: ", false: ""}[noDiscard])),
		Sync:    step("sync", fmt.Sprintf("sync -f %s/big\nsync\n", mnt)),
		Unmount: step("unmount", fmt.Sprintf("umount %s\nblockdev --flushbufs %s\necho 3 > /proc/sys/vm/drop_caches\n", mnt, dev)),
		Fsck:    step("fsck", fmt.Sprintf("/usr/sbin/e2fsck -f -n %s\n", dev)),
		Verify: step("verify", fmt.Sprintf(`mount -t ext4 -o ro %[2]s %[1]s
cd %[1]s
sha256sum -c -s %[3]s
[ "$(readlink link)" = tree/3/f3 ]
echo "$(wc -l < %[3]s) files verified"
cd /
umount %[1]s
`, mnt, dev, sums)),
	}
}
