package aoe

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// PacketConn is a Transport on a Linux network interface: an AF_PACKET
// raw socket bound to the AoE EtherType on that interface (it needs
// CAP_NET_RAW). A socket bound to one EtherType sees only frames the
// interface receives, not those this host sends. It goes through Go's
// network poller, so Close wakes a blocked ReadFrame.
type PacketConn struct {
	f   *os.File
	mac MAC
	mtu int
}

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
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, int(htons(EtherType)))
	if err != nil {
		return nil, fmt.Errorf("aoe: packet socket: %w", err)
	}
	sa := &unix.SockaddrLinklayer{Protocol: htons(EtherType), Ifindex: ifi.Index}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("aoe: bind %s: %w", iface, err)
	}
	// Room for a burst of an initiator's window of full frames.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 64*(ifi.MTU+14))
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 64*(ifi.MTU+14))
	p := &PacketConn{f: os.NewFile(uintptr(fd), "aoe:"+iface), mtu: ifi.MTU}
	copy(p.mac[:], ifi.HardwareAddr)
	return p, nil
}

// ReadFrame reads one frame.
func (p *PacketConn) ReadFrame(b []byte) (int, error) { return p.f.Read(b) }

// WriteFrame sends one frame on the interface.
func (p *PacketConn) WriteFrame(b []byte) error {
	_, err := p.f.Write(b)
	return err
}

func (p *PacketConn) MAC() MAC { return p.mac }
func (p *PacketConn) MTU() int { return p.mtu }

// Close closes the socket.
func (p *PacketConn) Close() error { return p.f.Close() }
