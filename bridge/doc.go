// Package bridge assembles a Network Hard Disk's datapath from the
// module's packages: the host driver issues ATA commands through an
// ata.Device's registers, a dma.Engine moves each data phase through a
// sector FIFO into host memory with the Internet checksum (package
// checksum) computed on the way, and the device's backend (an *nbd.Client,
// a memory disk, a file) holds the sectors.
//
// New builds a Bridge from a Config whose Datapath picks each of the
// paper's optimisations: DMA streaming, zero-copy, the checksum in flight,
// and pipelining the back end with the front end in chunks of a command or
// across commands. Table4 lists the paper's Table 4 rows, each one
// Datapath, and examples/ata2nbd runs the fastest.
//
// Measure measures datapaths as the paper does: each row's front end
// (host, ATA device and DMA engine over an in-cache memory disk) and back
// end (the bare backend making the row's requests) apart, and the row's
// bridge whole, interleaved, beside the cascade model's prediction from
// the two ends (package model). A Host writes the commands' data and
// checks what they read; Verifier is one whose checks cost a comparison
// and whose checksums are known in advance. examples/nhd prints its
// Measurement as this machine's Table 4.
//
// Pipelined across commands, the bridge puts an Ahead in front of its
// backend: read-ahead and write-behind as a backend wrapper, usable on its
// own in front of any ata.Backend.
//
// Errors cross the datapath intact on every variant: a backend read error
// ends the command with UNC and the failing LBA in the LBA registers, a
// write error with DF, ERR and ABRT and the failing LBA; a write behind
// that fails is reported by the next command or FLUSH CACHE with the
// failed write's LBA, its error wrapping ErrWriteBehind.
package bridge
