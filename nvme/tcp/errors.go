package tcp

import (
	"errors"
	"strconv"
)

// FES is the fatal error status of a TermReq (NVMe/TCP 1.0, figure 33).
type FES uint16

// The fatal error statuses.
const (
	FESInvalidField     FES = 1 // invalid PDU header field; FEI: its byte offset
	FESSequence         FES = 2 // PDU sequence error
	FESHeaderDigest     FES = 3 // header digest error
	FESDataOutOfRange   FES = 4 // data transfer out of range
	FESDataLimit        FES = 5 // data transfer limit exceeded (or R2T limit)
	FESUnsupportedParam FES = 6 // unsupported parameter; FEI: ICReq offset
)

var fesNames = [...]string{"status 0", "invalid PDU header field", "PDU sequence error", "header digest error",
	"data transfer out of range", "data transfer limit exceeded", "unsupported parameter"}

func (f FES) String() string {
	if int(f) < len(fesNames) {
		return fesNames[f]
	}
	return "status " + strconv.Itoa(int(f))
}

// FatalError is a transport error after which the connection is closed:
// a PDU this side refused (answered with a TermReq carrying FES and FEI
// when possible), or a TermReq received from the peer (Remote).
type FatalError struct {
	FES    FES
	FEI    uint32
	Msg    string
	Remote bool
}

func (e *FatalError) Error() string {
	s := "nvme/tcp: "
	if e.Remote {
		s += "peer terminated the connection: "
	}
	s += e.FES.String()
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	return s
}

// Is makes errors.Is(err, ErrProtocol) true for every FatalError.
func (e *FatalError) Is(target error) bool { return target == ErrProtocol }

func fatal(fes FES, fei uint32, msg string) *FatalError {
	return &FatalError{FES: fes, FEI: fei, Msg: msg}
}

// Sentinels of the package.
var (
	// ErrProtocol matches every *FatalError.
	ErrProtocol = errors.New("nvme/tcp: protocol error")
	// ErrDataDigest is returned for data whose digest does not match;
	// the command it belongs to fails, the connection goes on.
	ErrDataDigest = errors.New("nvme/tcp: data digest mismatch")
	// ErrClosed is returned by calls on a closed Host or Server.
	ErrClosed = errors.New("nvme/tcp: closed")
	// ErrUnaligned is returned for a host I/O not aligned to the
	// namespace's block size.
	ErrUnaligned = errors.New("nvme/tcp: I/O not aligned to the block size")
	// ErrDiscoveryChanged is returned by Discover when the discovery log
	// kept changing while it was read.
	ErrDiscoveryChanged = errors.New("nvme/tcp: discovery log kept changing while read")
	// ErrReplyTimeout ends a connection whose host did not take what the
	// target wrote to it (completions, read data, R2Ts) within
	// Server.ReplyTimeout: ServeConn returns an error matching it, and
	// the Server's Logger warns with it.
	ErrReplyTimeout = errors.New("nvme/tcp: host not reading its completions (Server.ReplyTimeout)")
)
