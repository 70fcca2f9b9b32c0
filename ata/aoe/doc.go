// Package aoe implements ATA over Ethernet (AoE protocol version 1,
// EtherType 0x88A2, as described in the AoEr11 specification) for serving
// this module's ATA devices to real hosts such as Linux's aoe driver.
//
// The codec: Header (the Ethernet and AoE headers), ATAArg, ConfigArg,
// MaskArg and ReserveArg, each parsed from a frame without copying
// (ParseX) and encoded into a caller's buffer (Put or Append), with the
// typed vocabulary Command, Flags, ATAFlags, ConfigCmd, MaskCmd, DirCmd,
// ReserveCmd and Error (the protocol's error codes, an error type).
//
// The target: a Target serves Disks (shelf.slot addresses) over a
// Transport. Each disk's ATA commands run through the registers of
// ata.Devices, driven by ata.Hosts as a host driver would, so the device's
// state machine decides every status and error. A disk with one ata.Host
// runs its commands on the goroutine that reads the frames (vblade's
// design, the least work per frame); one with several runs them on a
// goroutine per Host. PacketConn carries frames on a Linux interface
// (AF_PACKET, blocking system calls, batches of frames per recvmmsg and
// sendmmsg, other targets' frames dropped by a socket filter) and
// UnixgramConn over a unix datagram socket such as QEMU's -netdev dgram.
//
// What Linux's initiator needs, in short: replies with R set and the
// target's own shelf.slot, the request's tag echoed; ATA failures as ATA
// status ERR (an AoE error reply is only logged, and the command is
// retransmitted); a buffer count of at least 2; IDENTIFY words 83/86 bit 10
// and 100-103 for 48-bit addressing. AoE has no flush: durability is the
// target's choice (a Disk's devices without a write cache write through).
package aoe
