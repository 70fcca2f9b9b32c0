package tcp

import (
	"io"
	"net"
	"sync/atomic"
	"syscall"
)

// How the host reads its connection. A large C2HData payload goes from
// the socket straight into the caller's buffer at the PDU's offset
// (pduReader.readPayload), not through the pduReader's 64 KiB buffer and
// a copy out of it. The read of a payload's rest also reads what follows
// it, up to two headers (its data digest, a CapsuleResp, the next
// C2HData's header), into a small array in the same readv(2), and the
// buffer's reads from the socket are cut to that size until a header
// shows the stream has moved on (pduReader.pace): at depth, a large read
// then costs one system call, and the next payload is not pulled into
// the buffer. On a socket the reads are raw read(2) and readv(2) on the
// non-blocking descriptor through its RawConn, as the target does
// (server_sock.go): a wait parks on the network poller, and no read
// hands its P to the runtime or wakes the sysmon thread.

// hostAhead is what a direct read reads beyond the payload, and the most
// a read of the socket into the buffer reads while cut: the payload's
// data digest and two headers with their digests.
const hostAhead = DigestSize + 2*(HeaderSize+DigestSize)

// hostSock is the host queue's connection as its pduReader sees it (a
// directSource). It is used by the queue's reader goroutine only, but
// for the counts.
type hostSock struct {
	nc   net.Conn
	rc   syscall.RawConn // nil without a descriptor (a pipe, TLS)
	try  func(fd uintptr) bool
	tryv func(fd uintptr) bool

	cut   bool   // reads of the socket read at most hostAhead bytes
	ahead []byte // read by readDirect beyond its payload, not yet Read
	abuf  [hostAhead]byte

	p, q    []byte // the raw call's destinations: q after p, by readv
	n       int
	err     error
	retries int // readDirect: EAGAINs so far

	// bytes given to the buffer, and read straight into callers' buffers
	buffered, direct atomic.Int64
}

// newHostPDUReader returns the pduReader of a host queue on nc.
func newHostPDUReader(nc net.Conn) *pduReader {
	s := &hostSock{nc: nc}
	if sc, ok := nc.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			s.rc = rc
			s.try, s.tryv = s.read, s.readv
		}
	}
	r := newPDUReader(s, maxHostPDUData)
	r.direct = s
	return r
}

// Read fills the pduReader's buffer: bytes read ahead first, then the
// connection, at most hostAhead bytes while cut.
func (s *hostSock) Read(p []byte) (int, error) {
	if len(s.ahead) > 0 {
		n := copy(p, s.ahead)
		s.ahead = s.ahead[n:]
		s.buffered.Add(int64(n))
		return n, nil
	}
	if s.cut && len(p) > hostAhead {
		p = p[:hostAhead]
	}
	var n int
	var err error
	if s.rc == nil {
		n, err = s.nc.Read(p)
	} else {
		n, err = s.raw(s.try, p)
	}
	s.buffered.Add(int64(n))
	return n, err
}

func (s *hostSock) bulk() { s.cut = false }

// readDirect reads into p, and what follows into s.ahead in the same
// system call; it tries a few times at once before it parks, as the rest
// of the payload is on its way (payloadRetries).
func (s *hostSock) readDirect(p []byte) (int, error) {
	if len(s.ahead) > 0 {
		n := copy(p, s.ahead)
		s.ahead = s.ahead[n:]
		s.direct.Add(int64(n))
		return n, nil
	}
	s.cut = true
	var n int
	var err error
	if s.rc == nil {
		n, err = s.nc.Read(p)
	} else {
		s.q, s.retries = s.abuf[:], 0
		n, err = s.raw(s.tryv, p)
		s.q = nil
		if n > len(p) {
			s.ahead = s.abuf[:n-len(p)]
			n = len(p)
		}
	}
	s.direct.Add(int64(n))
	return n, err
}

// raw runs a raw read function through the RawConn, which parks it on
// the poller while it reports false; p is its destination, if any.
func (s *hostSock) raw(f func(fd uintptr) bool, p []byte) (int, error) {
	s.p, s.n, s.err = p, 0, nil
	err := s.rc.Read(f)
	s.p = nil
	if err != nil {
		return 0, err // closed, or past a deadline
	}
	return s.n, s.err
}

// read is read(2) into s.p; false (park) while the socket is empty.
func (s *hostSock) read(fd uintptr) bool {
	for {
		n, err := rawRead(fd, s.p)
		if err != syscall.EINTR {
			return s.settle(n, err)
		}
	}
}

// readv is readv(2) into s.p and s.q (read(2) into s.p where there is
// no raw readv), retried at once up to payloadRetries times when the socket is
// empty before it parks.
func (s *hostSock) readv(fd uintptr) bool {
	for {
		n, err := rawReadv(fd, s.p, s.q)
		switch {
		case err == syscall.EINTR:
		case err == syscall.EAGAIN && s.retries < payloadRetries:
			s.retries++
		default:
			return s.settle(n, err)
		}
	}
}

// settle records a raw call's result; false means park until readable.
func (s *hostSock) settle(n int, err error) bool {
	switch err {
	case nil:
		s.n = n
		if n == 0 {
			s.err = io.EOF
		}
		return true
	case syscall.EAGAIN:
		return false
	}
	s.err = err
	return true
}
