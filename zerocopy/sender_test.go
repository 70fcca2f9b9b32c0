//go:build linux

package zerocopy

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nhdkit/nhd/internal/allocs"
	"github.com/nhdkit/nhd/internal/testenv"
	"golang.org/x/sys/unix"
)

// randomBytes returns n bytes derived from seed.
func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 1}))
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	return p
}

// tempFile returns an open file holding data.
func tempFile(t *testing.T, data []byte) *os.File {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "src")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	return f
}

// connPair returns the two ends of a loopback stream connection over
// network "tcp" (127.0.0.1) or "unix".
func connPair(t testing.TB, network string) (net.Conn, net.Conn) {
	t.Helper()
	addr := "127.0.0.1:0"
	if network == "unix" {
		addr = testenv.SocketPath(t, "zc.sock")
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	client, err := net.Dial(network, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server := <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// collect reads c until EOF in the background.
func collect(c net.Conn) <-chan []byte {
	out := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(c)
		out <- b
	}()
	return out
}

// closeWrite ends the stream from the sending side.
func closeWrite(t *testing.T, c net.Conn) {
	t.Helper()
	if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatal(err)
	}
}

func checkStats(t *testing.T, s *Sender, want SendStats) {
	t.Helper()
	got := s.Stats()
	if !errors.Is(got.LastRefusal, want.LastRefusal) {
		t.Errorf("LastRefusal %v, want %v", got.LastRefusal, want.LastRefusal)
	}
	got.LastRefusal, want.LastRefusal = nil, nil
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stats differ (-want +got):\n%s", diff)
	}
}

var networks = []string{"tcp", "unix"}

func TestSendFile(t *testing.T) {
	data := randomBytes(3<<20+12345, 1)
	for _, network := range networks {
		t.Run(network, func(t *testing.T) {
			f := tempFile(t, data)
			dst, peer := connPair(t, network)
			got := collect(peer)
			var acct Accounting
			s := NewSender(dst)
			defer s.Close()
			s.SetAccounting(&acct)
			const off = 1000
			n := int64(len(data) - 2*off)
			sent, err := s.SendFile(f, off, n)
			if err != nil || sent != n {
				t.Fatalf("SendFile = %d, %v", sent, err)
			}
			closeWrite(t, dst)
			if !bytes.Equal(<-got, data[off:off+n]) {
				t.Fatal("received bytes differ from the file's")
			}
			if pos, _ := f.Seek(0, io.SeekCurrent); pos != 0 {
				t.Errorf("SendFile moved the file position to %d", pos)
			}
			checkStats(t, s, SendStats{Sendfile: PathStats{1, n}, LastPath: PathSendfile})
			if st := acct.Snapshot(); st.Crossings != 0 || st.Copied != 0 {
				t.Errorf("sendfile accounted %+v, want no copy and no crossing", st)
			}
		})
	}
}

func TestSendFileShortFile(t *testing.T) {
	data := randomBytes(5000, 2)
	f := tempFile(t, data)
	dst, peer := connPair(t, "unix")
	got := collect(peer)
	s := NewSender(dst)
	defer s.Close()
	sent, err := s.SendFile(f, 4000, 2000)
	if sent != 1000 || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("SendFile past EOF = %d, %v; want 1000, ErrUnexpectedEOF", sent, err)
	}
	if _, err := s.SendFile(f, -1, 1); !errors.Is(err, ErrRange) {
		t.Fatalf("negative offset: %v", err)
	}
	closeWrite(t, dst)
	if !bytes.Equal(<-got, data[4000:]) {
		t.Fatal("bytes differ")
	}
}

func TestSpliceFromFile(t *testing.T) {
	data := randomBytes(2<<20+777, 3)
	for _, network := range networks {
		t.Run(network, func(t *testing.T) {
			f := tempFile(t, data)
			dst, peer := connPair(t, network)
			got := collect(peer)
			var acct Accounting
			s := NewSender(dst)
			defer s.Close()
			s.SetAccounting(&acct)
			first := int64(100_000)
			if n, err := s.Splice(f, first); err != nil || n != first {
				t.Fatalf("Splice = %d, %v", n, err)
			}
			rest := int64(len(data)) - first
			if n, err := s.Splice(f, rest); err != nil || n != rest {
				t.Fatalf("second Splice = %d, %v", n, err)
			}
			if n, err := s.Splice(f, 1); n != 0 || !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("Splice at EOF = %d, %v", n, err)
			}
			closeWrite(t, dst)
			if !bytes.Equal(<-got, data) {
				t.Fatal("received bytes differ from the file's")
			}
			checkStats(t, s, SendStats{Splice: PathStats{3, int64(len(data))}, LastPath: PathSplice})
			if st := acct.Snapshot(); st.Crossings != 0 {
				t.Errorf("splice accounted %+v", st)
			}
		})
	}
}

func TestSpliceSocketToSocket(t *testing.T) {
	data := randomBytes(4<<20+3, 4)
	for _, srcNet := range networks {
		for _, dstNet := range networks {
			t.Run(srcNet+"->"+dstNet, func(t *testing.T) {
				in, feeder := connPair(t, srcNet)
				dst, peer := connPair(t, dstNet)
				got := collect(peer)
				go func() {
					feeder.Write(data)
					feeder.Close()
				}()
				s := NewSender(dst)
				defer s.Close()
				// An exact count first, then the rest until EOF through io.Copy.
				if n, err := s.Splice(in, 12345); err != nil || n != 12345 {
					t.Fatalf("Splice = %d, %v", n, err)
				}
				n, err := io.Copy(s, in)
				if err != nil || n != int64(len(data))-12345 {
					t.Fatalf("io.Copy = %d, %v", n, err)
				}
				closeWrite(t, dst)
				if !bytes.Equal(<-got, data) {
					t.Fatal("received bytes differ")
				}
				st := s.Stats()
				if st.Splice.Calls != 2 || st.Splice.Bytes != int64(len(data)) || st.Copy.Calls != 0 || st.Fallbacks != 0 {
					t.Errorf("stats %+v: want everything spliced", st)
				}
			})
		}
	}
}

func TestReadFromChoosesPath(t *testing.T) {
	data := randomBytes(1<<20, 5)
	dst, peer := connPair(t, "tcp")
	got := collect(peer)
	s := NewSender(dst)
	defer s.Close()
	f := tempFile(t, data)

	// io.Copy hands the file over wrapped (os.File.WriteTo): still sendfile.
	if n, err := io.Copy(s, io.LimitReader(f, 1000)); err != nil || n != 1000 {
		t.Fatalf("io.Copy(LimitReader(file)) = %d, %v", n, err)
	}
	if st := s.Stats(); st.LastPath != PathSendfile || st.Sendfile.Bytes != 1000 {
		t.Fatalf("limited file: %+v", st)
	}
	if n, err := io.Copy(s, f); err != nil || n != int64(len(data))-1000 {
		t.Fatalf("io.Copy(file) = %d, %v", n, err)
	}
	if st := s.Stats(); st.LastPath != PathSendfile || st.Sendfile.Bytes != int64(len(data)) {
		t.Fatalf("file: %+v", st)
	}
	// A source with no descriptor takes the copy path without a refusal.
	if n, err := s.ReadFrom(bytes.NewReader(data[:777])); err != nil || n != 777 {
		t.Fatalf("ReadFrom(bytes.Reader) = %d, %v", n, err)
	}
	if st := s.Stats(); st.LastPath != PathCopy || st.Fallbacks != 0 || st.Copy.Bytes != 777 {
		t.Fatalf("bytes.Reader: %+v", st)
	}
	lr := &io.LimitedReader{R: bytes.NewReader(data), N: 0}
	if n, err := s.ReadFrom(lr); n != 0 || err != nil {
		t.Fatalf("ReadFrom(empty LimitedReader) = %d, %v", n, err)
	}
	closeWrite(t, dst)
	want := append(append([]byte{}, data...), data[:777]...)
	if !bytes.Equal(<-got, want) {
		t.Fatal("received bytes differ")
	}
}

// appendFile opens a fresh file with O_APPEND: the kernel refuses splice and
// sendfile into it with EINVAL.
func appendFile(t *testing.T) *os.File {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "dst"), os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func readBack(t *testing.T, f *os.File) []byte {
	t.Helper()
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFallbackSendfileRefusedByDestination(t *testing.T) {
	data := randomBytes(700_001, 6)
	src := tempFile(t, data)
	dst := appendFile(t)
	var acct Accounting
	s := NewSender(dst)
	defer s.Close()
	s.SetAccounting(&acct)
	n, err := s.SendFile(src, 1, int64(len(data)-1))
	if err != nil || n != int64(len(data)-1) {
		t.Fatalf("SendFile = %d, %v", n, err)
	}
	if !bytes.Equal(readBack(t, dst), data[1:]) {
		t.Fatal("destination bytes differ")
	}
	checkStats(t, s, SendStats{Copy: PathStats{1, n}, Fallbacks: 1, LastPath: PathCopy, LastRefusal: unix.EINVAL})
	if st := acct.Snapshot(); st.Crossings != 2*n {
		t.Errorf("copy path accounted %d crossings, want %d", st.Crossings, 2*n)
	}
}

func TestFallbackSpliceRefusedByDestination(t *testing.T) {
	// The source fills the pipe, then the destination refuses: the bytes in
	// the pipe must be drained to it, and the rest copied.
	data := randomBytes(3<<20+5, 7)
	in, feeder := connPair(t, "tcp")
	go func() {
		feeder.Write(data)
		feeder.Close()
	}()
	dst := appendFile(t)
	s := NewSender(dst)
	defer s.Close()
	n, err := s.Splice(in, int64(len(data)))
	if err != nil || n != int64(len(data)) {
		t.Fatalf("Splice = %d, %v", n, err)
	}
	if !bytes.Equal(readBack(t, dst), data) {
		t.Fatal("destination bytes differ")
	}
	checkStats(t, s, SendStats{Copy: PathStats{1, n}, Fallbacks: 1, LastPath: PathCopy, LastRefusal: unix.EINVAL})
}

func TestFallbackSourceRefused(t *testing.T) {
	// The kernel splices nothing from /proc/self/cmdline (EINVAL), yet it
	// reads like a file: Splice and ReadFrom (which tries sendfile, since
	// procfs files are regular) must copy it.
	want, err := os.ReadFile("/proc/self/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	probe, err := os.Open("/proc/self/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	_, perr := unix.Splice(int(probe.Fd()), nil, p[1], nil, 64, 0)
	unix.Close(p[0])
	unix.Close(p[1])
	if !errors.Is(perr, unix.EINVAL) {
		testenv.Unavailable(t, "this kernel splices /proc/self/cmdline (err %v): no refusing source to test with", perr)
	}
	for _, viaReadFrom := range []bool{false, true} {
		src, err := os.Open("/proc/self/cmdline")
		if err != nil {
			t.Fatal(err)
		}
		dst, peer := connPair(t, "unix")
		got := collect(peer)
		s := NewSender(dst)
		var n int64
		if viaReadFrom {
			n, err = s.ReadFrom(src)
		} else {
			n, err = s.Splice(src, int64(len(want)))
		}
		src.Close()
		s.Close()
		if err != nil || n != int64(len(want)) {
			t.Fatalf("viaReadFrom=%v: sent %d, %v; want %d", viaReadFrom, n, err, len(want))
		}
		closeWrite(t, dst)
		if !bytes.Equal(<-got, want) {
			t.Fatalf("viaReadFrom=%v: bytes differ", viaReadFrom)
		}
		st := s.Stats()
		if st.Fallbacks != 1 || st.LastPath != PathCopy || !errors.Is(st.LastRefusal, unix.EINVAL) || st.Copy.Bytes != n {
			t.Fatalf("viaReadFrom=%v: stats %+v", viaReadFrom, st)
		}
	}
}

// TestFallbackENOSYS makes the system calls fail as on a kernel without
// them, part way through: the bytes already moved stay, the rest is copied.
func TestFallbackENOSYS(t *testing.T) {
	data := randomBytes(1<<20+9, 8)
	origSplice, origSendfile := spliceSys, sendfileSys
	t.Cleanup(func() { spliceSys, sendfileSys = origSplice, origSendfile })
	calls := 0
	spliceSys = func(rfd int, roff *int64, wfd int, woff *int64, n int, flags int) (int64, error) {
		if calls++; calls > 3 {
			return -1, unix.ENOSYS
		}
		return origSplice(rfd, roff, wfd, woff, n, flags)
	}
	sendfileSys = func(out, in int, off *int64, n int) (int, error) {
		if calls++; calls > 2 {
			return -1, unix.ENOSYS
		}
		return origSendfile(out, in, off, min(n, 100_000))
	}
	for _, useSplice := range []bool{true, false} {
		calls = 0
		f := tempFile(t, data)
		dst, peer := connPair(t, "tcp")
		got := collect(peer)
		s := NewSender(dst)
		var n int64
		var err error
		if useSplice {
			n, err = s.Splice(f, int64(len(data)))
		} else {
			n, err = s.SendFile(f, 0, int64(len(data)))
		}
		s.Close()
		if err != nil || n != int64(len(data)) {
			t.Fatalf("splice=%v: sent %d, %v", useSplice, n, err)
		}
		closeWrite(t, dst)
		if !bytes.Equal(<-got, data) {
			t.Fatalf("splice=%v: bytes differ", useSplice)
		}
		st := s.Stats()
		kernel := st.Sendfile
		if useSplice {
			kernel = st.Splice
		}
		if st.Fallbacks != 1 || !errors.Is(st.LastRefusal, unix.ENOSYS) || kernel.Bytes == 0 || kernel.Bytes+st.Copy.Bytes != n {
			t.Fatalf("splice=%v: stats %+v", useSplice, st)
		}
	}
}

// wrapped hides the conn's SyscallConn, as any wrapper type does.
type wrapped struct{ net.Conn }

// forwarding is a wrapper that keeps the zero-copy paths by forwarding
// SyscallConn.
type forwarding struct{ net.Conn }

func (f forwarding) SyscallConn() (syscall.RawConn, error) {
	return f.Conn.(syscall.Conn).SyscallConn()
}

func TestWrappedConnLosesZeroCopy(t *testing.T) {
	data := randomBytes(200_000, 9)
	for _, tc := range []struct {
		name string
		wrap func(net.Conn) io.Writer
		path Path
	}{
		{"wrapped", func(c net.Conn) io.Writer { return wrapped{c} }, PathCopy},
		{"forwarding SyscallConn", func(c net.Conn) io.Writer { return forwarding{c} }, PathSendfile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tempFile(t, data)
			dst, peer := connPair(t, "tcp")
			got := collect(peer)
			s := NewSender(tc.wrap(dst))
			defer s.Close()
			if n, err := s.SendFile(f, 0, int64(len(data))); err != nil || n != int64(len(data)) {
				t.Fatalf("SendFile = %d, %v", n, err)
			}
			closeWrite(t, dst)
			if !bytes.Equal(<-got, data) {
				t.Fatal("bytes differ")
			}
			st := s.Stats()
			if st.LastPath != tc.path {
				t.Fatalf("path %v, want %v (%+v)", st.LastPath, tc.path, st)
			}
			if tc.path == PathCopy && (!errors.Is(st.LastRefusal, ErrNoFD) || st.Fallbacks != 1) {
				t.Fatalf("wrapped conn: refusal %v, fallbacks %d", st.LastRefusal, st.Fallbacks)
			}
		})
	}
}

func TestPathString(t *testing.T) {
	for p, want := range map[Path]string{PathNone: "none", PathSplice: "splice", PathSendfile: "sendfile", PathCopy: "copy", Path(9): "Path(9)"} {
		if p.String() != want {
			t.Errorf("Path(%d).String() = %q, want %q", p, p.String(), want)
		}
	}
}

// TestMessageWriteToSocket sends messages with writev over real sockets and
// checks the bytes and that WriteTo allocates nothing in steady state.
func TestMessageWriteToSocket(t *testing.T) {
	for _, network := range networks {
		t.Run(network, func(t *testing.T) {
			p := NewPool(64 << 10)
			payload := p.Get()
			copy(payload.Writable(), randomBytes(64<<10, 10))
			payload.Freeze()
			defer payload.Release()
			dst, peer := connPair(t, network)
			frame := append([]byte("0123456789abcdef"), payload.Bytes()...)
			const runs = 200
			const frames = 1 + 2*runs // the first send, PerRun's warm-up, its runs
			got := make(chan []byte, 1)
			go func() { // reads into one buffer, so that it allocates nothing while measured
				b := make([]byte, frames*len(frame)+1)
				n, _ := io.ReadFull(peer, b)
				got <- b[:n]
			}()
			m := NewMessage(p)
			send := func() {
				m.Append(payload.Ref(), 0, 64<<10)
				h, err := m.Push(16)
				if err != nil {
					t.Fatal(err)
				}
				copy(h, "0123456789abcdef")
				if m.NumFragments() != 2 {
					t.Fatalf("%d fragments, want header + payload", m.NumFragments())
				}
				if n, err := m.WriteTo(dst); err != nil || n != 16+64<<10 {
					t.Fatalf("WriteTo = %d, %v", n, err)
				}
			}
			send()
			nallocs := allocs.PerRun(runs, send)
			closeWrite(t, dst)
			b := <-got
			if len(b) != frames*len(frame) {
				t.Fatalf("received %d bytes, want %d", len(b), frames*len(frame))
			}
			for i := range frames {
				if !bytes.Equal(b[i*len(frame):(i+1)*len(frame)], frame) {
					t.Fatalf("frame %d differs", i)
				}
			}
			if nallocs > allocs.Slack {
				t.Errorf("WriteTo allocates %.1f times per message, want 0", nallocs)
			}
			if st := p.Stats(); st.Outstanding != 1 {
				t.Errorf("buffers outstanding after sending: %+v", st)
			}
		})
	}
}

// TestCopiesPerByte measures the copy accounting of four ways to move a
// 64 KiB payload (plus a 16-byte header where there is one) to a socket;
// README's table comes from its log (go test -run TestCopiesPerByte -v).
func TestCopiesPerByte(t *testing.T) {
	const size = 64 << 10
	data := randomBytes(size, 11)
	pool := NewPool(size)
	type result struct{ copied, crossings int64 }
	paths := []struct {
		name string
		run  func(acct *Accounting, src net.Conn, f *os.File, dst net.Conn)
		want result
	}{
		{"read, copy header+payload into a frame, write (before)", func(acct *Accounting, src net.Conn, _ *os.File, dst net.Conn) {
			m := NewMessage(pool)
			m.SetAccounting(acct)
			s := NewSender(dst)
			s.SetAccounting(acct)
			m.ReadFromN(src, size)
			h, _ := m.Push(16)
			copy(h, "0123456789abcdef")
			frame := make([]byte, m.Len())
			m.CopyTo(frame)
			m.Release()
			s.Write(frame)
		}, result{size + 16, 2*size + 16}},
		{"ReadFromN, Push, WriteTo (after)", func(acct *Accounting, src net.Conn, _ *os.File, dst net.Conn) {
			m := NewMessage(pool)
			m.SetAccounting(acct)
			m.ReadFromN(src, size)
			h, _ := m.Push(16)
			copy(h, "0123456789abcdef")
			m.WriteTo(dst)
		}, result{0, 2*size + 16}},
		{"file -> socket by read + write", func(acct *Accounting, _ net.Conn, f *os.File, dst net.Conn) {
			s := NewSender(wrapped{dst})
			s.SetAccounting(acct)
			s.SendFile(f, 0, size)
		}, result{0, 2 * size}},
		{"file -> socket by SendFile", func(acct *Accounting, _ net.Conn, f *os.File, dst net.Conn) {
			s := NewSender(dst)
			s.SetAccounting(acct)
			s.SendFile(f, 0, size)
			s.Close()
		}, result{0, 0}},
		{"file -> socket by Splice", func(acct *Accounting, _ net.Conn, f *os.File, dst net.Conn) {
			s := NewSender(dst)
			s.SetAccounting(acct)
			s.Splice(f, size)
			s.Close()
		}, result{0, 0}},
	}
	for _, p := range paths {
		f := tempFile(t, data)
		src, feeder := connPair(t, "unix")
		go func() { feeder.Write(data) }()
		dst, peer := connPair(t, "unix")
		got := collect(peer)
		var acct Accounting
		acct.AddPayload(size)
		p.run(&acct, src, f, dst)
		closeWrite(t, dst)
		if b := <-got; !bytes.Equal(b[len(b)-size:], data) {
			t.Errorf("%s: payload differs", p.name)
		}
		st := acct.Snapshot()
		if (result{st.Copied, st.Crossings}) != p.want {
			t.Errorf("%s: copied %d, crossings %d; want %+v", p.name, st.Copied, st.Crossings, p.want)
		}
		t.Logf("| %s | %.2f | %.2f |", p.name, st.CopiesPerByte(), st.CrossingsPerByte())
	}
	if st := pool.Stats(); st.Outstanding != 0 {
		t.Errorf("leak: %+v", st)
	}
}
