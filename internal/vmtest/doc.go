// Package vmtest boots the installed Linux kernel in QEMU for tests that
// need a real host on the other side of a protocol: the kernel's NBD
// client, its AoE initiator, libata on QEMU's IDE disk.
//
// A test calls New (which skips naming the Debian packages
// qemu-system-x86, linux-image-amd64 and busybox-static when something is
// missing, and fails instead when CI is set), adds kernel modules
// (Module, with dependencies from modprobe --show-depends), programs
// (Program, with the libraries ldd lists), files and QEMU arguments, then
// the guest steps (Step: a shell script each), and calls Run. Run writes
// an initramfs as a cpio newc Archive, boots QEMU under TCG emulation
// (the guest has one CPU and Memory MiB), follows the console, reports
// each step as a subtest with its output and duration, and always kills
// QEMU by its process group, at the end or after Timeout.
//
// Networking is QEMU's own and needs no privileges: UserNet gives the
// guest 10.0.2.15 with the host's loopback at 10.0.2.2; Ethernet segments
// between the guest and a test go over a -netdev dgram unix socket (see
// Datagram). Tests reach no other address.
package vmtest
