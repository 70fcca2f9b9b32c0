package aoe

import (
	"errors"
	"io/fs"
	"net"
	"os"
)

// UnixgramConn is a Transport over a unix datagram socket, one Ethernet
// frame per datagram: the wire of QEMU's -netdev dgram with unix
// addresses (local.type=unix,local.path=PEER,remote.type=unix,
// remote.path=PATH), which needs no privileges. Its MAC and MTU are what
// the caller says: the socket has neither.
type UnixgramConn struct {
	conn *net.UnixConn
	peer *net.UnixAddr
	mac  MAC
	mtu  int
	path string
}

// ListenUnixgram binds a datagram socket at path (removed on Close) and
// sends frames to peer, the other end's socket path.
func ListenUnixgram(path, peer string, mac MAC, mtu int) (*UnixgramConn, error) {
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return nil, err
	}
	return &UnixgramConn{conn: c, peer: &net.UnixAddr{Name: peer, Net: "unixgram"}, mac: mac, mtu: mtu, path: path}, nil
}

// ReadFrame reads one datagram.
func (u *UnixgramConn) ReadFrame(b []byte) (int, error) {
	n, _, err := u.conn.ReadFromUnix(b)
	return n, err
}

// WriteFrame sends b as one datagram to the peer. A peer that is not
// there yet (QEMU not started) loses the frame, as a wire would.
func (u *UnixgramConn) WriteFrame(b []byte) error {
	_, err := u.conn.WriteToUnix(b, u.peer)
	if errors.Is(err, fs.ErrNotExist) || isConnRefused(err) {
		return nil
	}
	return err
}

func (u *UnixgramConn) MAC() MAC { return u.mac }
func (u *UnixgramConn) MTU() int { return u.mtu }

// Close closes the socket and removes its path.
func (u *UnixgramConn) Close() error {
	err := u.conn.Close()
	os.Remove(u.path)
	return err
}
