package aoe

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrClosed is returned by a PacketConn's methods after Close.
var ErrClosed = errors.New("aoe: transport closed")

// closePoll is how often a ReadFrame blocked on an idle wire looks for a
// Close: the longest Close waits.
const closePoll = 100 * time.Millisecond

// epoch is the origin of PacketConn.yielded, on the monotonic clock.
var epoch = time.Now()

// yieldEvery is how often ReadFrame lets the scheduler run (see yield).
const yieldEvery = 5 * time.Millisecond

// PacketConn is a Transport on a Linux network interface: an AF_PACKET
// raw socket bound to the AoE EtherType on that interface (it needs
// CAP_NET_RAW). A socket bound to one EtherType sees only frames the
// interface receives, not those this host sends; FilterAddresses narrows
// that to the frames of the Target's own disks, in the kernel.
//
// Its methods are blocking system calls, as in vblade's loop: a frame
// costs one system call to read and one to write, without a round
// through Go's network poller. A ReadFrame on an idle wire wakes every
// closePoll to see whether Close was called, so Close returns within
// that time. ReadFrame, WriteFrame and Close may be called concurrently.
type PacketConn struct {
	fd     int
	mac    MAC
	mtu    int
	mu     sync.RWMutex // held for reading during each system call on fd
	closed atomic.Bool
	// yielded is when ReadFrame last called runtime.Gosched, in
	// nanoseconds since epoch.
	yielded atomic.Int64
	rd, wr  mmsg // ReadFrames' and WriteFrames' message vectors
}

// mmsg is the message vector of one recvmmsg or sendmmsg caller, kept
// for reuse: one message of one buffer per frame.
type mmsg struct {
	mu   sync.Mutex
	msgs []unix.Mmsghdr
	iovs []unix.Iovec
}

// set points the vector at frames and returns its messages.
func (m *mmsg) set(frames [][]byte) []unix.Mmsghdr {
	if len(m.msgs) < len(frames) {
		m.msgs = make([]unix.Mmsghdr, len(frames))
		m.iovs = make([]unix.Iovec, len(frames))
	}
	for i, f := range frames {
		m.iovs[i] = unix.Iovec{Base: unsafe.SliceData(f)}
		m.iovs[i].SetLen(len(f))
		m.msgs[i] = unix.Mmsghdr{Hdr: unix.Msghdr{Iov: &m.iovs[i], Iovlen: 1}}
	}
	return m.msgs[:len(frames)]
}

// clear drops the vector's pointers to the caller's buffers.
func (m *mmsg) clear() { clear(m.iovs) }

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// ListenPacket opens the AoE socket on the interface named iface.
func ListenPacket(iface string) (*PacketConn, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, fmt.Errorf("aoe: %w", err)
	}
	if len(ifi.HardwareAddr) != 6 {
		return nil, fmt.Errorf("aoe: %s is not an Ethernet interface", iface)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(EtherType)))
	if err != nil {
		return nil, fmt.Errorf("aoe: packet socket: %w", err)
	}
	sa := &unix.SockaddrLinklayer{Protocol: htons(EtherType), Ifindex: ifi.Index}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("aoe: bind %s: %w", iface, err)
	}
	tv := unix.NsecToTimeval(closePoll.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("aoe: receive timeout: %w", err)
	}
	// Room for a burst of an initiator's window of full frames.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 64*(ifi.MTU+14))
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 64*(ifi.MTU+14))
	p := &PacketConn{fd: fd, mtu: ifi.MTU}
	copy(p.mac[:], ifi.HardwareAddr)
	return p, nil
}

// ReadFrame reads one frame, waiting for it as long as the PacketConn is
// open.
func (p *PacketConn) ReadFrame(b []byte) (int, error) {
	p.yield()
	for {
		p.mu.RLock()
		if p.closed.Load() {
			p.mu.RUnlock()
			return 0, ErrClosed
		}
		n, err := unix.Read(p.fd, b)
		p.mu.RUnlock()
		switch {
		case err == nil:
			return n, nil
		case err != unix.EAGAIN && err != unix.EINTR:
			return 0, fmt.Errorf("aoe: read: %w", err)
		}
	}
}

// ReadFrames waits for a frame like ReadFrame and returns it with the
// frames already queued behind it, up to len(bufs), in one recvmmsg.
func (p *PacketConn) ReadFrames(bufs [][]byte, lens []int) (int, error) {
	if len(bufs) == 0 {
		return 0, nil
	}
	p.yield()
	p.rd.mu.Lock()
	defer p.rd.mu.Unlock()
	msgs := p.rd.set(bufs)
	for {
		p.mu.RLock()
		if p.closed.Load() {
			p.mu.RUnlock()
			return 0, ErrClosed
		}
		n, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, uintptr(p.fd), uintptr(unsafe.Pointer(&msgs[0])),
			uintptr(len(msgs)), unix.MSG_WAITFORONE, 0, 0)
		p.mu.RUnlock()
		switch {
		case errno == 0:
			for i := range int(n) {
				lens[i] = int(msgs[i].Len)
			}
			p.rd.clear()
			return int(n), nil
		case errno != unix.EAGAIN && errno != unix.EINTR:
			return 0, fmt.Errorf("aoe: read: %w", errno)
		}
	}
}

// WriteFrames sends frames in order, as many per sendmmsg as it takes.
func (p *PacketConn) WriteFrames(frames [][]byte) error {
	p.wr.mu.Lock()
	defer p.wr.mu.Unlock()
	msgs := p.wr.set(frames)
	defer p.wr.clear()
	p.mu.RLock()
	defer p.mu.RUnlock()
	for len(msgs) > 0 {
		if p.closed.Load() {
			return ErrClosed
		}
		n, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(p.fd), uintptr(unsafe.Pointer(&msgs[0])),
			uintptr(len(msgs)), 0, 0, 0)
		switch {
		case errno == 0 && n > 0:
			msgs = msgs[n:]
		case errno == 0:
			return errors.New("aoe: write: sendmmsg sent nothing")
		case errno != unix.EINTR:
			return fmt.Errorf("aoe: write: %w", errno)
		}
	}
	return nil
}

// yield gives the scheduler a turn every yieldEvery. A goroutine that
// only ever blocks in system calls never reaches a scheduling point, and
// Go's sysmon treats one that has not for 10 ms as running too long: it
// preempts it and hands its P to another thread, again and again while
// frames flow.
func (p *PacketConn) yield() {
	now := time.Since(epoch).Nanoseconds()
	if last := p.yielded.Load(); now-last >= yieldEvery.Nanoseconds() && p.yielded.CompareAndSwap(last, now) {
		runtime.Gosched()
	}
}

// WriteFrame sends one frame on the interface.
func (p *PacketConn) WriteFrame(b []byte) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed.Load() {
		return ErrClosed
	}
	for {
		_, err := unix.Write(p.fd, b)
		if err != unix.EINTR {
			if err != nil {
				return fmt.Errorf("aoe: write: %w", err)
			}
			return nil
		}
	}
}

// FilterAddresses attaches a socket filter that drops, in the kernel,
// responses and the frames addressed to none of addrs.
func (p *PacketConn) FilterAddresses(addrs []Address) error {
	prog, err := addressFilter(addrs)
	if err != nil {
		return err
	}
	f := make([]unix.SockFilter, len(prog))
	for i, in := range prog {
		f[i] = unix.SockFilter{Code: in.Code, Jt: in.JT, Jf: in.JF, K: in.K}
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed.Load() {
		return ErrClosed
	}
	fp := unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}
	if err := unix.SetsockoptSockFprog(p.fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &fp); err != nil {
		return fmt.Errorf("aoe: socket filter: %w", err)
	}
	return nil
}

func (p *PacketConn) MAC() MAC { return p.mac }
func (p *PacketConn) MTU() int { return p.mtu }

// Close makes ReadFrame return ErrClosed and closes the socket once no
// call is using it (within closePoll).
func (p *PacketConn) Close() error {
	if p.closed.Swap(true) {
		return ErrClosed
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return unix.Close(p.fd)
}
