package ata

import (
	"errors"
	"strconv"
)

// Sentinel errors. An *Error from the host driver matches the ones that
// name its error bits through errors.Is.
var (
	// ErrNotH2DFIS is returned by TaskFile.ParseFIS for a FIS that is not a
	// Register Host-to-Device FIS.
	ErrNotH2DFIS = errors.New("ata: not a register host-to-device FIS")
	// ErrBadCHS is returned by Decode for a CHS address outside the
	// geometry (sector 0, a head or sector beyond it).
	ErrBadCHS = errors.New("ata: CHS address outside the geometry")
	// ErrOutOfRange is returned by Command.Encode when a field does not fit
	// the command's registers or addressing mode.
	ErrOutOfRange = errors.New("ata: command field out of range for its task file")
	// ErrInfo is returned by DeviceInfo.Validate and NewDevice for a device
	// description that cannot be represented in IDENTIFY DEVICE data.
	ErrInfo = errors.New("ata: invalid device description")
	// ErrNoBackend is returned by NewDevice without a backend.
	ErrNoBackend = errors.New("ata: no backend")
	// ErrNoTrim is returned by NewDevice for a DeviceInfo with TRIM over a
	// backend without a Trim method (see Trimmer) or without a DMA engine:
	// the drive would advertise TRIM and abort every DATA SET MANAGEMENT.
	ErrNoTrim = errors.New("ata: TRIM advertised but the backend has no Trim method or the device no DMA engine")
	// ErrIdentifyChecksum is returned by ParseIdentify when word 255 carries
	// the A5h signature and the 512 bytes do not sum to 0 mod 256.
	ErrIdentifyChecksum = errors.New("ata: IDENTIFY checksum mismatch")
	// ErrTimeout is returned by the host driver when the device did not
	// leave BSY, raise DRQ or INTRQ within Host.MaxPolls status reads.
	ErrTimeout = errors.New("ata: timed out waiting for the device")
	// ErrProtocol is returned by the host driver when the device's status
	// does not follow the protocol (DRQ where none is due, DRQ missing).
	ErrProtocol = errors.New("ata: device broke the command protocol")
	// ErrBufferSize is returned by the host driver when the buffer does not
	// match the command's data phase.
	ErrBufferSize = errors.New("ata: buffer length does not match the data phase")
	// ErrOutsideTransfer is what the device's backend view returns to a
	// DMA engine that reads or writes outside the sectors of the current
	// command; the call does not reach the backend.
	ErrOutsideTransfer = errors.New("ata: DMA access outside the command's sectors")
	// ErrNoBusMaster is returned by the host driver for a DMA command when
	// it has no BusMaster.
	ErrNoBusMaster = errors.New("ata: DMA command without a bus master")

	// ErrAborted matches an *Error with ABRT set: command or parameter not
	// supported.
	ErrAborted = errors.New("ata: command aborted")
	// ErrIDNotFound matches an *Error with IDNF set: address out of range.
	ErrIDNotFound = errors.New("ata: ID not found (address out of range)")
	// ErrUncorrectable matches an *Error with UNC set: a read failed.
	ErrUncorrectable = errors.New("ata: uncorrectable data error")
	// ErrDeviceFault matches an *Error with status DF set: a write or
	// flush failed.
	ErrDeviceFault = errors.New("ata: device fault")
	// ErrInterfaceCRC matches an *Error with ICRC set.
	ErrInterfaceCRC = errors.New("ata: interface CRC error")
)

// Error is a command that ended in error, as the host sees it: the status
// and error registers and, for errors that report one, the failing LBA read
// back from the task file.
type Error struct {
	Op     Opcode
	Status Status
	Err    ErrorBits
	LBA    uint64
}

func (e *Error) Error() string {
	s := "ata: " + e.Op.String() + ": status " + e.Status.String() + " error " + e.Err.String()
	if e.Err&(ErrorIDNF|ErrorUNC) != 0 || e.Status&StatusDF != 0 {
		s += " at LBA " + strconv.FormatUint(e.LBA, 10)
	}
	return s
}

// Is makes errors.Is(err, ErrAborted) and friends work.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrAborted:
		return e.Err&ErrorABRT != 0
	case ErrIDNotFound:
		return e.Err&ErrorIDNF != 0
	case ErrUncorrectable:
		return e.Err&ErrorUNC != 0
	case ErrDeviceFault:
		return e.Status&StatusDF != 0
	case ErrInterfaceCRC:
		return e.Err&ErrorICRC != 0
	}
	return false
}

// TransitionError is an illegal step of the device state machine: the
// Transition function has no edge for Event in State.
type TransitionError struct {
	State State
	Event Event
}

func (e *TransitionError) Error() string {
	return "ata: no transition for " + e.Event.String() + " in state " + e.State.String()
}
