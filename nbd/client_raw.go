package nbd

import (
	"io"
	"net"
	"syscall"
	"time"
)

// The client's socket reads, on a connection with a descriptor (a TCP or
// unix socket, not TLS): raw read(2) and readv(2) on the non-blocking
// descriptor through its RawConn, as the server does (sock_raw_linux.go
// says why: a process that waits for its peer thousands of times a second
// otherwise pays a futex wake of the runtime's sysmon thread on many of
// them). The network poller still parks the reader while the socket is
// empty, and read deadlines (the cuts of client_conn.go) still hold.
//
// A payload read straight into its caller's buffer also reads what comes
// after it, up to the next reply's header, into ahead (one readv of two
// pieces), so that at depth a reply costs one system call, not two.
type clientRawSock struct {
	rc    syscall.RawConn
	p     []byte // read into
	n     int
	err   error
	try   func(fd uintptr) bool // r.read, bound once
	tryv  func(fd uintptr) bool // r.readv, bound once
	iov   [2]syscall.Iovec
	ahead [clientHeaderRead]byte

	spin   time.Duration // how long a timed Read may spin on an empty socket (client_spin.go)
	spun   int           // how its spin ended: spinNone, spinFound, spinRanOut
	timed  bool          // Read times its wait for the socket (a reply at depth one)
	empty  time.Time     // when a timed Read first found the socket empty
	waited time.Duration // how long the last timed Read waited for its bytes
}

func newClientRawSock(nc net.Conn) *clientRawSock {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	r := &clientRawSock{rc: rc}
	r.try, r.tryv = r.read, r.readv
	return r
}

func (r *clientRawSock) read(fd uintptr) bool {
	for {
		n, err := sockRawRead(fd, r.p)
		if err == syscall.EAGAIN && r.timed && r.empty.IsZero() {
			r.empty = time.Now()
		}
		if err == syscall.EAGAIN && r.spin > 0 {
			n, err = r.spinRead(fd)
		}
		if err != syscall.EINTR {
			return r.settle(n, err)
		}
	}
}

func (r *clientRawSock) readv(fd uintptr) bool {
	for {
		n, err := sockRawReadv(fd, r.iov[:])
		if err != syscall.EINTR {
			return r.settle(n, err)
		}
	}
}

// settle records a raw call's result; false means park until readable.
func (r *clientRawSock) settle(n int, err error) bool {
	switch err {
	case nil:
		r.n = n
		if n == 0 {
			r.err = io.EOF
		}
		return true
	case syscall.EAGAIN:
		return false
	}
	r.err = err
	return true
}

// Read reads into p, first spinning for up to r.spin if the socket is
// empty; r.spun then says how the spin ended and, if r.timed, r.waited how
// long the socket stayed empty (0 if it was not, or the read failed).
func (r *clientRawSock) Read(p []byte) (int, error) {
	r.p, r.n, r.err, r.spun, r.waited = p, 0, nil, spinNone, 0
	err := r.rc.Read(r.try)
	if !r.empty.IsZero() {
		if err == nil && r.err == nil && r.timed {
			r.waited = time.Since(r.empty)
		}
		r.empty = time.Time{}
	}
	r.p, r.spin, r.timed = nil, 0, false
	if err != nil {
		return 0, err // a deadline, or the connection closed
	}
	return r.n, r.err
}

// ReadAhead reads into p and then, once p is full, into r.ahead; it
// returns how much went into p and the bytes read ahead.
func (r *clientRawSock) ReadAhead(p []byte) (int, []byte, error) {
	r.iov[0] = syscall.Iovec{Base: &p[0]}
	r.iov[0].SetLen(len(p))
	r.iov[1] = syscall.Iovec{Base: &r.ahead[0]}
	r.iov[1].SetLen(len(r.ahead))
	r.n, r.err = 0, nil
	err := r.rc.Read(r.tryv)
	r.iov = [2]syscall.Iovec{} // keep no buffer alive
	if err != nil {
		return 0, nil, err
	}
	if r.n > len(p) {
		return len(p), r.ahead[:r.n-len(p)], r.err
	}
	return r.n, nil, r.err
}
