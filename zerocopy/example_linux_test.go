//go:build linux

package zerocopy_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"

	"github.com/nhdkit/nhd/zerocopy"
)

// A file goes to a loopback TCP connection by sendfile: no byte crosses into
// user space. Through a wrapper that hides the conn's file descriptor the
// same call falls back to a copy, and the stats say so.
func ExampleSender() {
	f, _ := os.CreateTemp("", "zerocopy-example")
	defer os.Remove(f.Name())
	defer f.Close()
	f.Write(make([]byte, 1<<20))

	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	got := make(chan int64)
	go func() {
		c, _ := ln.Accept()
		n, _ := io.Copy(io.Discard, c)
		c.Close()
		got <- n
	}()
	conn, _ := net.Dial("tcp", ln.Addr().String())

	var acct zerocopy.Accounting
	s := zerocopy.NewSender(conn)
	s.SetAccounting(&acct)
	n, err := s.SendFile(f, 0, 1<<20)
	acct.AddPayload(n)
	fmt.Println(n, err, s.Stats().LastPath, acct.Snapshot())

	wrapped := zerocopy.NewSender(struct{ net.Conn }{conn})
	n, err = wrapped.SendFile(f, 0, 1<<20)
	st := wrapped.Stats()
	fmt.Println(n, err, st.LastPath, st.LastRefusal)

	s.Close()
	conn.Close()
	fmt.Println(<-got)
	// Output:
	// 1048576 <nil> sendfile 1048576 payload bytes: 0.00 copies/byte, 0.00 crossings/byte
	// 1048576 <nil> copy zerocopy: destination exposes no file descriptor (not a syscall.Conn)
	// 2097152
}

// The bridge's read reply: the NBD payload is read from the server's
// connection into a pooled buffer, the 16-byte reply header is pushed into
// the buffer's headroom, and the whole reply goes to the host in one write.
// No payload byte is copied in user space.
func ExampleMessage_ReadFromN() {
	server, serverPeer := loopback()
	host, hostPeer := loopback()
	defer server.Close()
	defer serverPeer.Close()
	defer hostPeer.Close()
	payload := bytes.Repeat([]byte{0xA5}, 64<<10)
	go func() { serverPeer.Write(payload) }()
	got := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(hostPeer)
		got <- b
	}()

	pool := zerocopy.NewPool(64 << 10)
	var acct zerocopy.Accounting
	m := zerocopy.NewMessage(pool)
	m.SetAccounting(&acct)
	acct.AddPayload(64 << 10)
	if _, err := m.ReadFromN(server, 64<<10); err != nil {
		fmt.Println(err)
		return
	}
	h, _ := m.Push(16)
	binary.BigEndian.PutUint32(h[0:], 0x67446698) // NBD simple reply magic
	binary.BigEndian.PutUint32(h[4:], 0)          // no error
	binary.BigEndian.PutUint64(h[8:], 7)          // cookie
	fmt.Println("fragments:", m.NumFragments())
	n, err := m.WriteTo(host)
	host.Close()
	reply := <-got
	fmt.Println("sent:", n, err, "payload intact:", bytes.Equal(reply[16:], payload))
	fmt.Println(acct.Snapshot())
	fmt.Println("buffers in use:", pool.Stats().Outstanding)
	// Output:
	// fragments: 1
	// sent: 65552 <nil> payload intact: true
	// 65536 payload bytes: 0.00 copies/byte, 2.00 crossings/byte
	// buffers in use: 0
}

// loopback returns both ends of a TCP connection on 127.0.0.1.
func loopback() (net.Conn, net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		panic(err)
	}
	return c, <-accepted
}
