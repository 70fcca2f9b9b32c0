// Package ata implements an ATA disk at register level, as described in
// ATA/ATAPI-7 and ACS-3, for putting behind an FPGA, a virtual machine's
// IDE or AHCI model, an ATA-over-Ethernet target or a test harness: the
// host writes task-file registers, the device decodes the command, moves
// the data by PIO through the data register or by DMA through a DMA
// engine, and turns the command into block requests on a Backend (an
// io.ReaderAt and io.WriterAt, plus optional Flush, Sync and Trim, and
// AsyncReaderAt and AsyncWriterAt for requests in flight).
//
// The pieces, each usable alone:
//
//   - Registers: typed Status, ErrorBits, DeviceBits and Control bits with
//     String and Has; Reg names the registers.
//   - TaskFile: one command's register values, current and HOB bytes, with
//     PutFIS and ParseFIS for a SATA/AHCI Register Host-to-Device FIS.
//   - Decode and Command.Encode: task file to typed Command and back
//     (Opcode with String, Protocol, LBA28/LBA48/CHS through a Geometry,
//     counts where 0 means 256 or 65536, FUA). Neither allocates.
//   - DeviceInfo.Identify: IDENTIFY DEVICE data from a description, with
//     the word 255 checksum; Identify.Bytes gives the 512 wire bytes,
//     AppendHex the text hdparm --Istdin reads, and String prints what
//     hdparm -I prints (transfer modes named by XferMode).
//   - Device: the state machine (State, Event, Transition) with the HOB
//     register FIFO, BSY/DRQ per PIO block, 16- and 32-bit data register,
//     INTRQ unless nIEN, SRST with the ATA signature, and the command set:
//     READ/WRITE SECTORS, MULTIPLE and DMA (EXT, FUA), READ VERIFY, IDENTIFY,
//     SET FEATURES, SET MULTIPLE MODE, FLUSH CACHE (EXT), DATA SET
//     MANAGEMENT TRIM, READ NATIVE MAX ADDRESS (EXT), power management,
//     EXECUTE DEVICE DIAGNOSTIC, INITIALIZE DEVICE PARAMETERS, SEEK,
//     RECALIBRATE, SMART (ENABLE/DISABLE OPERATIONS, RETURN STATUS, READ
//     DATA and READ THRESHOLDS), SECURITY FREEZE LOCK, NOP.
//   - DMA: the bus-master seam the dma package implements (this package
//     does not import it), and BufferDMA, a simple engine over one buffer.
//     A backend with AsyncReaderAt/AsyncWriterAt (an *nbd.Client) keeps
//     them through the seam: the engine sees a view of the backend with
//     the same methods (the method sets of dma.AsyncReaderAt and
//     dma.AsyncWriterAt), so it can keep the backend's requests in flight.
//   - Host: a host-side driver following Linux libata's sequence, issuing
//     any command by PIO or DMA through a Port (a *Device is one). Attach
//     makes one that has learnt the device from IDENTIFY DEVICE, so the
//     capacity is given once, in DeviceInfo.
//
// NewDevice checks the description against what it is given: TRIM needs
// a backend with a Trim method and a DMA engine (ErrNoTrim), and Sectors
// must fit in a backend that can tell its size (a Sizer, a regular file).
//
// How commands end (Linux counts success as Status.OK):
//
//	success                         DRDY|DSC
//	unsupported opcode or parameter DRDY|ERR, error ABRT
//	address past the end            DRDY|ERR, error IDNF|ABRT, failing LBA in the LBA registers
//	                                (a 28-bit or CHS command ends at LBA 0FFFFFFEh, as words 60-61 say)
//	backend read error              DRDY|ERR, error UNC, failing LBA
//	backend write/flush/trim error  DRDY|DF|ERR, error ABRT, failing LBA (flush: only from an OffsetError)
//	DMA engine error                DRDY|ERR, error ABRT
//
// The failing LBA is the sector where the backend stopped: the end of a
// short ReadAt or WriteAt, the start of a failed asynchronous request, or
// the offset an *OffsetError in the error's chain names (a write-behind
// cache reporting a write that failed after it was accepted). The same
// holds on every path: PIO, DMA through BufferDMA, and package dma's
// Engine inline, on its worker or store-and-forward.
package ata
