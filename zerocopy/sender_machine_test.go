//go:build linux

package zerocopy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"pgregory.net/rapid"
)

// sink collects everything a connection receives.
type sink struct {
	mu  sync.Mutex
	buf []byte
}

func (s *sink) run(c net.Conn) {
	p := make([]byte, 64<<10)
	for {
		n, err := c.Read(p)
		s.mu.Lock()
		s.buf = append(s.buf, p[:n]...)
		s.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// await waits until n bytes arrived and returns them.
func (s *sink) await(t *rapid.T, n int) []byte {
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		got := len(s.buf)
		s.mu.Unlock()
		if got >= n || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte{}, s.buf...)
}

// TestSenderStateMachine drives one Sender through random sequences of
// sendfile, splice from a file and from a socket, ReadFrom, plain writes and
// kernel refusals injected part way (ENOSYS, EINVAL): the destination must
// receive exactly the concatenation of what each call reports sent, the
// counters must add up, and a refusal must never lose or repeat a byte,
// whatever the state of the Sender's pipe and source cache.
func TestSenderStateMachine(t *testing.T) {
	origSplice, origSendfile := spliceSys, sendfileSys
	t.Cleanup(func() { spliceSys, sendfileSys = origSplice, origSendfile })
	data := randomBytes(200_000, 12)
	f := tempFile(t, data)
	rapid.Check(t, func(rt *rapid.T) {
		// Fault injection: after `budget` more system calls, refuse with errno.
		budget, errno := -1, unix.ENOSYS
		tick := func() error {
			if budget == 0 {
				return errno
			}
			if budget > 0 {
				budget--
			}
			return nil
		}
		spliceSys = func(rfd int, roff *int64, wfd int, woff *int64, n int, flags int) (int64, error) {
			if err := tick(); err != nil {
				return -1, err
			}
			return origSplice(rfd, roff, wfd, woff, min(n, 7000), flags)
		}
		sendfileSys = func(out, in int, off *int64, n int) (int, error) {
			if err := tick(); err != nil {
				return -1, err
			}
			return origSendfile(out, in, off, min(n, 9000))
		}

		network := rapid.SampledFrom(networks).Draw(rt, "network")
		dst, peer := connPair(t, network)
		in, feeder := connPair(t, "tcp")
		var got sink
		go got.run(peer)
		s := NewSender(dst)
		defer s.Close()
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			rt.Fatal(err)
		}
		var want []byte
		pos := 0 // f's file position, which Splice and ReadFrom move
		var kernelBytes int64
		rt.Repeat(map[string]func(*rapid.T){
			"sendfile": func(rt *rapid.T) {
				off := rapid.IntRange(0, len(data)).Draw(rt, "off")
				n := rapid.IntRange(0, 40_000).Draw(rt, "n")
				sent, err := s.SendFile(f, int64(off), int64(n))
				avail := min(n, len(data)-off)
				if sent != int64(avail) || (avail < n) != errors.Is(err, io.ErrUnexpectedEOF) || (avail == n && err != nil) {
					rt.Fatalf("SendFile(%d, %d) = %d, %v; file has %d", off, n, sent, err, len(data))
				}
				want = append(want, data[off:off+avail]...)
				kernelBytes += sent
			},
			"splice file": func(rt *rapid.T) {
				n := rapid.IntRange(0, 40_000).Draw(rt, "n")
				sent, err := s.Splice(f, int64(n))
				avail := min(n, len(data)-pos)
				if sent != int64(avail) || (avail < n) != errors.Is(err, io.ErrUnexpectedEOF) || (avail == n && err != nil) {
					rt.Fatalf("Splice(file at %d, %d) = %d, %v", pos, n, sent, err)
				}
				want = append(want, data[pos:pos+avail]...)
				pos += avail
				kernelBytes += sent
			},
			"read from limited file": func(rt *rapid.T) {
				n := rapid.IntRange(0, 40_000).Draw(rt, "n")
				sent, err := s.ReadFrom(io.LimitReader(f, int64(n)))
				avail := min(n, len(data)-pos)
				if sent != int64(avail) || err != nil {
					rt.Fatalf("ReadFrom(file at %d, limit %d) = %d, %v", pos, n, sent, err)
				}
				want = append(want, data[pos:pos+avail]...)
				pos += avail
				kernelBytes += sent
			},
			"rewind": func(rt *rapid.T) {
				pos = rapid.IntRange(0, len(data)).Draw(rt, "pos")
				if _, err := f.Seek(int64(pos), io.SeekStart); err != nil {
					rt.Fatal(err)
				}
			},
			"splice socket": func(rt *rapid.T) {
				chunk := rapid.SliceOfN(rapid.Byte(), 1, 30_000).Draw(rt, "chunk")
				fed := make(chan error, 1)
				go func() { _, err := feeder.Write(chunk); fed <- err }()
				sent, err := s.Splice(in, int64(len(chunk)))
				if err := <-fed; err != nil {
					rt.Fatal(err)
				}
				if sent != int64(len(chunk)) || err != nil {
					rt.Fatalf("Splice(socket, %d) = %d, %v", len(chunk), sent, err)
				}
				want = append(want, chunk...)
				kernelBytes += sent
			},
			"write": func(rt *rapid.T) {
				p := rapid.SliceOfN(rapid.Byte(), 0, 5000).Draw(rt, "p")
				if n, err := s.Write(p); n != len(p) || err != nil {
					rt.Fatalf("Write = %d, %v", n, err)
				}
				want = append(want, p...)
			},
			"refuse soon": func(rt *rapid.T) {
				budget = rapid.IntRange(0, 6).Draw(rt, "budget")
				errno = rapid.SampledFrom([]unix.Errno{unix.ENOSYS, unix.EINVAL, unix.EOPNOTSUPP}).Draw(rt, "errno")
			},
			"stop refusing": func(rt *rapid.T) { budget = -1 },
			"": func(rt *rapid.T) {
				st := s.Stats()
				if st.Splice.Bytes+st.Sendfile.Bytes+st.Copy.Bytes != kernelBytes {
					rt.Fatalf("counters %+v add up to %d, calls reported %d", st, st.Splice.Bytes+st.Sendfile.Bytes+st.Copy.Bytes, kernelBytes)
				}
				if st.Fallbacks > 0 && st.LastRefusal == nil {
					rt.Fatalf("fallbacks without a refusal: %+v", st)
				}
			},
		})
		budget = -1
		dst.Close()
		if b := got.await(rt, len(want)); !bytes.Equal(b, want) {
			rt.Fatalf("destination received %d bytes, want %d (first difference at %d)", len(b), len(want), firstDiff(b, want))
		}
		feeder.Close()
		in.Close()
	})
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
