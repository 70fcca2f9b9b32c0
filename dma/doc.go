// Package dma implements the data movement of an NHD's front end: Bus
// Master IDE PRD tables (SFF-8038i), scatter-gather lists over Go memory,
// and an engine that moves the data phase of an ATA DMA command between a
// device backend and host memory through a sector FIFO (package fifo).
//
// The engine runs in two modes, the two sides of the NHD paper's front-end
// optimisation: StoreAndForward moves one sector at a time with a handshake
// per sector (the paper's PIO loop, an interrupt per sector), Streaming
// overlaps the backend side and the host side through the FIFO with one
// interrupt to start and one to finish (the paper's DMA streaming). An
// optional tap sees every byte once, in order, in place, for a checksum
// computed in flight (the paper's checksum offload). A streaming transfer can
// run on the calling goroutine alone (Config.InlineMax), where a goroutine
// hand-off costs more than the copy it would overlap; from an AsyncReaderAt
// or to an AsyncWriterAt such a transfer still overlaps the device's
// requests with the host side's copying.
//
// AsyncReaderAt and AsyncWriterAt are the seam to a device that keeps
// requests in flight: StartReadAt or StartWriteAt returns a Handle, and
// Wait waits for that request, in any order, exactly once. An *nbd.Client
// implements both as it is; package ata's Device hands its engine a view of
// the backend that keeps the backend's async methods (and records where a
// request failed, for the LBA the host sees). Neither ata nor nbd imports
// dma: Handle is an alias of uint64, so the method sets match.
//
// PeekReaderAt and ReserveWriterAt are the seam to a device that holds the
// data in buffers of its own (a read-ahead or write-behind cache) and lends
// them: a streaming engine then copies straight between the lent buffer
// and host memory, skipping its FIFO, so each byte is copied once.
// Package ata's Device passes them through to its engine too.
//
// The same engine code runs against the wall clock at memory speed, or
// against a VirtualClock with a Timing profile, where it models each
// transfer's duration from the steps it performs. With PaperBefore and
// PaperAfter it reproduces the paper's front-end figures for a 64 KiB read:
// 34287 us before, 4250 + 495 us after.
//
// Engine has exactly the two methods of package ata's DMA interface
// (DeviceToHost, HostToDevice), so it plugs into an ata device without
// either package importing the other.
package dma
