package nvme

import (
	"errors"
	"strconv"
	"syscall"

	"github.com/nhdkit/nhd/nbd"
)

// Status is the status field of a completion without its phase tag, laid
// out as in NVMe Base 2.0, figure 92, shifted right by one (the value Linux
// calls NVME_SC_*):
//
//	bits 7:0   SC: status code
//	bits 10:8  SCT: status code type
//	bits 12:11 CRD: command retry delay
//	bit 13     M: more (the error log has more)
//	bit 14     DNR: do not retry
//
// A Status other than success is an error. errors.Is matches it against
// another Status with the same SCT and SC (whatever its DNR, More and CRD
// bits), against the syscall.Errno that Errno returns, and against the
// nbd.Errno of that value: so errors.Is(err, syscall.EIO) holds for an
// internal error or a media error reported by a controller.
type Status uint16

// Status code types (SCT).
const (
	TypeGeneric         = 0
	TypeCommandSpecific = 1
	TypeMedia           = 2
	TypePath            = 3
)

// Flags of a Status.
const (
	StatusMore Status = 1 << 13
	StatusDNR  Status = 1 << 14
)

// Generic command status values (SCT 0, NVMe Base 2.0, figure 94).
const (
	StatusSuccess            Status = 0x00
	StatusInvalidOpcode      Status = 0x01
	StatusInvalidField       Status = 0x02
	StatusCIDConflict        Status = 0x03
	StatusDataTransferError  Status = 0x04
	StatusAbortedPowerLoss   Status = 0x05
	StatusInternalError      Status = 0x06
	StatusAbortRequested     Status = 0x07
	StatusAbortedSQDeletion  Status = 0x08
	StatusInvalidNamespace   Status = 0x0B
	StatusCommandSequence    Status = 0x0C
	StatusSGLLengthInvalid   Status = 0x0F
	StatusSGLTypeInvalid     Status = 0x11
	StatusSGLOffsetInvalid   Status = 0x16
	StatusKeepAliveExpired   Status = 0x19
	StatusKeepAliveInvalid   Status = 0x1A
	StatusNamespaceProtected Status = 0x20 // namespace is write protected
	StatusTransientTransport Status = 0x22
	StatusLBAOutOfRange      Status = 0x80
	StatusCapacityExceeded   Status = 0x81
	StatusNamespaceNotReady  Status = 0x82
)

// Command specific status values (SCT 1): admin (NVMe Base 2.0, figure
// 95) and Fabrics (NVMe over Fabrics 1.1, figure 14).
const (
	StatusAERLimitExceeded        Status = 0x105
	StatusInvalidLogPage          Status = 0x109
	StatusFeatureNotSaveable      Status = 0x10D
	StatusFeatureNotChangeable    Status = 0x10E
	StatusConnectIncompatible     Status = 0x180 // incompatible format
	StatusConnectBusy             Status = 0x181 // controller busy
	StatusConnectInvalidParam     Status = 0x182
	StatusConnectRestartDiscovery Status = 0x183
	StatusConnectInvalidHost      Status = 0x184
)

// Media and data integrity errors (SCT 2).
const (
	StatusWriteFault      Status = 0x280
	StatusUnrecoveredRead Status = 0x281
)

var statusNames = map[Status]string{
	StatusSuccess: "success", StatusInvalidOpcode: "invalid opcode", StatusInvalidField: "invalid field",
	StatusCIDConflict: "command ID conflict", StatusDataTransferError: "data transfer error",
	StatusAbortedPowerLoss: "aborted: power loss", StatusInternalError: "internal error",
	StatusAbortRequested: "abort requested", StatusAbortedSQDeletion: "aborted: SQ deletion",
	StatusInvalidNamespace: "invalid namespace or format", StatusCommandSequence: "command sequence error",
	StatusSGLLengthInvalid: "data SGL length invalid", StatusSGLTypeInvalid: "SGL descriptor type invalid",
	StatusSGLOffsetInvalid: "SGL offset invalid", StatusKeepAliveExpired: "keep alive timer expired",
	StatusKeepAliveInvalid: "keep alive timeout invalid", StatusNamespaceProtected: "namespace is write protected",
	StatusTransientTransport: "transient transport error", StatusLBAOutOfRange: "LBA out of range",
	StatusCapacityExceeded: "capacity exceeded", StatusNamespaceNotReady: "namespace not ready",
	StatusAERLimitExceeded: "asynchronous event request limit exceeded", StatusInvalidLogPage: "invalid log page",
	StatusFeatureNotSaveable: "feature not saveable", StatusFeatureNotChangeable: "feature not changeable",
	StatusConnectIncompatible: "connect: incompatible format", StatusConnectBusy: "connect: controller busy",
	StatusConnectInvalidParam: "connect: invalid parameters", StatusConnectRestartDiscovery: "connect: restart discovery",
	StatusConnectInvalidHost: "connect: invalid host", StatusWriteFault: "write fault",
	StatusUnrecoveredRead: "unrecovered read error",
}

// Code returns s without its DNR, More and CRD bits: SCT<<8 | SC.
func (s Status) Code() Status { return s & 0x7FF }

// SCT returns the status code type.
func (s Status) SCT() uint8 { return uint8(s >> 8 & 7) }

// SC returns the status code.
func (s Status) SC() uint8 { return uint8(s) }

// Success reports whether s is a successful completion.
func (s Status) Success() bool { return s.Code() == StatusSuccess }

// DNR reports whether the do-not-retry bit is set.
func (s Status) DNR() bool { return s&StatusDNR != 0 }

func (s Status) String() string {
	name, ok := statusNames[s.Code()]
	if !ok {
		name = "status 0x" + strconv.FormatUint(uint64(s.Code()), 16)
	}
	if s.DNR() {
		name += " (DNR)"
	}
	return name
}

func (s Status) Error() string { return "nvme: " + s.String() }

// Errno returns the syscall error a block layer would see for s:
// ENOTSUP for an invalid opcode, EINVAL for a field, namespace, SGL,
// sequence or range error, ENOSPC for capacity exceeded, EPERM for a write
// protected namespace, ESHUTDOWN for an abort, EIO for the rest, 0 for
// success.
func (s Status) Errno() syscall.Errno {
	switch c := s.Code(); {
	case c == StatusSuccess:
		return 0
	case c == StatusInvalidOpcode:
		return syscall.ENOTSUP
	case c == StatusCapacityExceeded:
		return syscall.ENOSPC
	case c == StatusNamespaceProtected:
		return syscall.EPERM
	case c == StatusAbortedPowerLoss, c == StatusAbortRequested, c == StatusAbortedSQDeletion:
		return syscall.ESHUTDOWN
	case c == StatusInvalidField, c == StatusCIDConflict, c == StatusInvalidNamespace,
		c == StatusCommandSequence, c == StatusSGLLengthInvalid, c == StatusSGLTypeInvalid,
		c == StatusSGLOffsetInvalid, c == StatusKeepAliveInvalid, c == StatusLBAOutOfRange,
		c == StatusInvalidLogPage, c == StatusFeatureNotSaveable, c == StatusFeatureNotChangeable,
		c.SCT() == TypeCommandSpecific && c.SC() >= 0x80:
		return syscall.EINVAL
	}
	return syscall.EIO
}

// Is reports whether target is a Status of the same code, the
// syscall.Errno of s, or the nbd.Errno of that value.
func (s Status) Is(target error) bool {
	switch t := target.(type) {
	case Status:
		return t.Code() == s.Code()
	case syscall.Errno:
		return t != 0 && t == s.Errno()
	case nbd.Errno:
		return t.Syscall() == s.Errno()
	}
	return false
}

// StatusOf chooses the status a controller completes a command with when
// its backend failed with err: a Status as itself; a syscall.Errno or an
// nbd.Errno by meaning (EPERM, EROFS, EACCES: write protected; ENOSPC,
// EDQUOT, EFBIG: capacity exceeded; EINVAL, EOVERFLOW: invalid field;
// ENOTSUP: invalid opcode; ESHUTDOWN: aborted); anything else as an
// internal error. Statuses chosen here carry DNR except internal errors
// and aborts, which a retry may cure. StatusOf(nil) is StatusSuccess.
func StatusOf(err error) Status {
	if err == nil {
		return StatusSuccess
	}
	var s Status
	if errors.As(err, &s) {
		return s
	}
	for _, m := range errnoStatus {
		if errors.Is(err, m.errno) {
			return m.status
		}
	}
	return StatusInternalError
}

// errnoStatus maps backend errors, matched with errors.Is (so an
// nbd.Errno or any error whose Is knows the errno matches too), to the
// status StatusOf chooses.
var errnoStatus = [...]struct {
	errno  syscall.Errno
	status Status
}{
	{syscall.EPERM, StatusNamespaceProtected | StatusDNR},
	{syscall.EROFS, StatusNamespaceProtected | StatusDNR},
	{syscall.EACCES, StatusNamespaceProtected | StatusDNR},
	{syscall.ENOSPC, StatusCapacityExceeded | StatusDNR},
	{syscall.EDQUOT, StatusCapacityExceeded | StatusDNR},
	{syscall.EFBIG, StatusCapacityExceeded | StatusDNR},
	{syscall.EINVAL, StatusInvalidField | StatusDNR},
	{syscall.EOVERFLOW, StatusInvalidField | StatusDNR},
	{syscall.ENOTSUP, StatusInvalidOpcode | StatusDNR},
	{syscall.ESHUTDOWN, StatusAbortedSQDeletion},
}
