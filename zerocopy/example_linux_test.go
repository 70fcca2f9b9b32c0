//go:build linux

package zerocopy_test

import (
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
