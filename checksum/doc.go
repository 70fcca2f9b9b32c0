// Package checksum implements the Internet checksum of RFC 1071 (the 16-bit
// ones' complement sum used by IPv4, TCP, UDP and ICMP) at memory speed, and
// fused with copying, the software form of the checksum offload the NHD paper
// gives its FPGA: the sum is computed while the data moves, in one trip across
// the memory bus (Druschel's integrated layer processing).
//
// # Contract
//
// Checksum(b, initial) returns the ones' complement sum of b's big-endian
// 16-bit words (a trailing odd byte is the high byte of a zero-padded word)
// added to initial, folded to 16 bits and not complemented: the contract of
// gVisor's pkg/tcpip/checksum. A checksum field holds the complement of the
// sum taken with the field zero; a receiver checks that the sum over the data
// including the field is 0xffff (Verify). TCP and UDP sums start from the
// pseudo-header sum (PseudoHeaderIPv4, PseudoHeaderIPv6).
//
// Sums of pieces join with Combine (first piece of even length), CombineOdd
// (odd length: RFC 1071's byte swap) or CombineAt (by offset), so chunks can
// be summed in parallel or as they arrive. Update and Update32 patch a
// checksum field when a covered word changes (RFC 1624), as a router does for
// the TTL or a NAT for an address.
//
// A Checksummer carries a sum across writes of any length and implements
// hash.Hash; it is the per-chunk tap a DMA engine calls. CopyAndChecksum and
// Checksummer.CopyAndWrite copy and sum in one pass.
//
// # Speed
//
// On amd64 with AVX2 the sums run in assembly selected at init
// (golang.org/x/sys/cpu), at about the L2 cache's read bandwidth; elsewhere,
// or built with the purego tag, a pure-Go loop with two independent carry
// chains runs at about 1.6 to 1.9 times gVisor's (1500 bytes to 64 KiB). The
// fused copy loads each 32 bytes once, stores them and adds them from the
// register; from 8 MiB it stores around the cache (runtime.memmove does from
// 1 MiB), without the second pass over DRAM that copy followed by Checksum
// then costs. The README in this directory has the figures and the commands
// that reproduce them. No function allocates.
//
// # Concurrency and retention
//
// The functions are safe for concurrent use and do not retain their slices.
// A Checksummer is not safe for concurrent use.
//
// # CRC32C
//
// This package does not do CRC32C (the iSCSI and NVMe/TCP data digest, RFC
// 3720): use hash/crc32 with crc32.MakeTable(crc32.Castagnoli), which the
// standard library accelerates with the SSE4.2 and ARMv8 CRC instructions.
package checksum
