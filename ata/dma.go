package ata

import (
	"errors"
	"io"
)

// DMA is the bus master that moves the data phase of a DMA command.
//
// The device calls one method per DMA command (DATA SET MANAGEMENT
// included), from the goroutine that wrote the command register, and
// waits for it to return. Where host memory lives (a PRD table, a
// scatter-gather list) is the engine's business, programmed by the host
// side before the command. The src and dst the device passes wrap its
// backend; the engine may call them several times, for any split of the
// range, and must not keep them after returning; calls outside [off,
// off+n) fail with ErrOutsideTransfer without reaching the backend. When
// the backend is an AsyncReaderAt (AsyncWriterAt), src (dst) is one too,
// so an engine can keep the backend's requests in flight (package dma's
// Engine does, streaming inline); it must wait for every request it
// started before it returns (the device waits for any left and ends the
// command in ABRT). When the backend is a PeekReaderAt (ReserveWriterAt),
// src (dst) is one too, so an engine can copy straight between the
// backend's buffers and host memory; it must end every loan before it
// returns (the device ends any left: a read's released, a write's
// committed empty, and the command in ABRT). An error ends the command: a backend read error in UNC
// and a backend write error in DF|ERR, both with the LBA of the first byte
// the backend failed on (the device records it, the engine only returns
// the error, wrapped or as it is); an error of the engine's own (one that
// does not wrap the backend's, or an access outside the transfer) in ABRT.
type DMA interface {
	// DeviceToHost moves n bytes, read from src starting at offset off, into host memory (an ATA read command).
	DeviceToHost(src io.ReaderAt, off, n int64) error
	// HostToDevice moves n bytes from host memory into dst starting at offset off (an ATA write command).
	HostToDevice(dst io.WriterAt, off, n int64) error
}

// BusMaster is the host's side of a DMA engine: it points the engine at the
// host memory of the next DMA command. The host driver calls Prepare before
// writing the command register of each DMA command.
//
// The engine may keep buf until the next Prepare (BufferDMA and package
// dma's Engine do), and moves data to or from it whenever the device runs
// a DMA command. So buf is the caller's again after Host.Exec returns only
// while no DMA command reaches the device without going through Exec
// (which prepares before each); a host that also writes the device's
// registers directly must Prepare(nil), or another buffer, before it
// reuses buf.
type BusMaster interface {
	Prepare(buf []byte) error
}

// ErrDMABuffer is returned by BufferDMA when the transfer is longer than the
// prepared buffer (on real hardware: the PRD table is too short).
var ErrDMABuffer = errors.New("ata: DMA transfer longer than the host buffer")

// BufferDMA is a DMA engine over one host buffer: Prepare (or setting Buf)
// points it at host memory, and each transfer copies between that buffer
// and the backend in one ReadAt or WriteAt call, from the start of the
// buffer. It suits tests and hosts that do not need package dma's PRD
// tables. It allocates nothing and is not safe for concurrent use; use one
// per Device.
type BufferDMA struct {
	Buf []byte
	// Moved counts the bytes transferred so far.
	Moved int64
}

// Prepare points the engine at buf; it keeps buf until the next Prepare.
func (e *BufferDMA) Prepare(buf []byte) error {
	e.Buf = buf
	return nil
}

// DeviceToHost reads n bytes at off from src into the buffer.
func (e *BufferDMA) DeviceToHost(src io.ReaderAt, off, n int64) error {
	if n > int64(len(e.Buf)) {
		return ErrDMABuffer
	}
	m, err := src.ReadAt(e.Buf[:n], off)
	e.Moved += int64(m)
	if err == io.EOF && int64(m) == n {
		err = nil
	}
	return err
}

// HostToDevice writes n bytes from the buffer to dst at off.
func (e *BufferDMA) HostToDevice(dst io.WriterAt, off, n int64) error {
	if n > int64(len(e.Buf)) {
		return ErrDMABuffer
	}
	m, err := dst.WriteAt(e.Buf[:n], off)
	e.Moved += int64(m)
	return err
}

// BusMasterFunc adapts a function to BusMaster.
type BusMasterFunc func(buf []byte) error

// Prepare calls f(buf).
func (f BusMasterFunc) Prepare(buf []byte) error { return f(buf) }
