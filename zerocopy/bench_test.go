//go:build linux

package zerocopy

import (
	"io"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func BenchmarkPoolGetRelease(b *testing.B) {
	p := NewPool(DefaultSize)
	p.Prealloc(1)
	b.ReportAllocs()
	for b.Loop() {
		p.Get().Release()
	}
}

func BenchmarkPoolGetRefRelease(b *testing.B) {
	p := NewPool(DefaultSize)
	p.Prealloc(1)
	b.ReportAllocs()
	for b.Loop() {
		buf := p.Get()
		buf.Ref()
		buf.Release()
		buf.Release()
	}
}

func BenchmarkPoolGetReleaseParallel(b *testing.B) {
	p := NewPool(DefaultSize)
	p.Prealloc(64)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p.Get().Release()
		}
	})
}

// BenchmarkMessageEdit pushes and pops a header and splits and rejoins a
// 64 KiB message: metadata work only, no payload byte moves.
func BenchmarkMessageEdit(b *testing.B) {
	p := NewPool(DefaultSize)
	m := NewMessage(p)
	defer m.Release()
	m.Append(p.Get(), 0, DefaultSize)
	var tail Message
	var hdr [16]byte
	b.ReportAllocs()
	for b.Loop() {
		h, err := m.Push(16)
		if err != nil {
			b.Fatal(err)
		}
		copy(h, hdr[:])
		m.Split(16+4096, &tail)
		m.Join(&tail)
		m.Pop(hdr[:])
	}
	if m.NumFragments() != 1 {
		b.Fatalf("%d fragments after the edits, want 1", m.NumFragments())
	}
}

// drain reads c until it fails, into one buffer.
func drain(c net.Conn) <-chan struct{} {
	done := make(chan struct{})
	buf := make([]byte, 1<<20) // allocated here, not while a benchmark counts
	go func() {
		defer close(done)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
		}
	}()
	return done
}

const (
	benchPayload = 64 << 10
	benchHeader  = 16
)

// BenchmarkSend sends a 64 KiB payload behind a 16-byte header (an NBD
// reply) over loopback, four ways, in the same run:
//
//	flat: a frame flattened once, before the loop (the anchor);
//	writev: a Message of header buffer + shared payload buffer, one writev;
//	headroom: the header pushed into the payload buffer's headroom, one write;
//	copy: header and payload copied into a frame each time (the "before").
func BenchmarkSend(b *testing.B) {
	for _, network := range networks {
		b.Run(network+"/flat", func(b *testing.B) { benchSend(b, network, sendFlat) })
		b.Run(network+"/writev", func(b *testing.B) { benchSend(b, network, sendWritev) })
		b.Run(network+"/headroom", func(b *testing.B) { benchSend(b, network, sendHeadroom) })
		b.Run(network+"/copy", func(b *testing.B) { benchSend(b, network, sendCopy) })
	}
}

type sendMode int

const (
	sendFlat sendMode = iota
	sendWritev
	sendHeadroom
	sendCopy
)

func benchSend(b *testing.B, network string, mode sendMode) {
	dst, peer := connPair(b, network)
	done := drain(peer)
	defer func() { dst.Close(); <-done }()

	pool := NewPool(benchPayload)
	hdrs, _ := NewPoolConfig(Config{Size: 1, Headroom: 64})
	payload := pool.Get()
	fill(payload.Writable(), 0xA5)
	payload.Freeze()
	defer payload.Release()
	header := make([]byte, benchHeader)
	fill(header, 0x67)
	frame := append(append([]byte{}, header...), payload.Bytes()...)
	var acct Accounting
	m := NewMessage(pool)
	m.SetHeaderPool(hdrs)
	m.SetAccounting(&acct)
	if mode == sendHeadroom {
		payload.Release() // this mode takes a fresh, exclusive buffer each time
		defer pool.Get()  // balance the deferred Release above
	}

	b.SetBytes(benchPayload + benchHeader)
	b.ReportAllocs()
	for b.Loop() {
		acct.AddPayload(benchPayload)
		var err error
		switch mode {
		case sendFlat:
			_, err = dst.Write(frame)
		case sendWritev:
			m.Append(payload.Ref(), 0, benchPayload)
			h, _ := m.Push(benchHeader)
			copy(h, header)
			_, err = m.WriteTo(dst)
		case sendHeadroom:
			buf := pool.Get() // the payload a reader would have filled
			m.Append(buf, 0, benchPayload)
			h, _ := m.Push(benchHeader)
			copy(h, header)
			_, err = m.WriteTo(dst)
		case sendCopy:
			m.Append(payload.Ref(), 0, benchPayload)
			h, _ := m.Push(benchHeader)
			copy(h, header)
			m.CopyTo(frame) // flatten: the copy zero-copy avoids
			m.Release()
			_, err = dst.Write(frame)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(acct.Snapshot().CopiesPerByte(), "copies/B")
}

// BenchmarkSendFile sends 64 KiB chunks of a 16 MiB file (in the page cache)
// to a loopback socket by sendfile, by splice, and by read+write.
func BenchmarkSendFile(b *testing.B) {
	const fileSize = 16 << 20
	f, err := os.CreateTemp(b.TempDir(), "src")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(make([]byte, fileSize)); err != nil {
		b.Fatal(err)
	}
	for _, network := range networks {
		for _, path := range []Path{PathSendfile, PathSplice, PathCopy} {
			b.Run(network+"/"+path.String(), func(b *testing.B) {
				dst, peer := connPair(b, network)
				done := drain(peer)
				defer func() { dst.Close(); <-done }()
				s := NewSender(dst)
				defer s.Close()
				buf := make([]byte, benchPayload)
				var off int64
				if _, err := f.Seek(0, io.SeekStart); err != nil { // Splice reads from the position
					b.Fatal(err)
				}
				b.SetBytes(benchPayload)
				b.ReportAllocs()
				for b.Loop() {
					if off == fileSize {
						off = 0
						f.Seek(0, io.SeekStart)
					}
					var err error
					switch path {
					case PathSendfile:
						_, err = s.SendFile(f, off, benchPayload)
					case PathSplice:
						_, err = s.Splice(f, benchPayload)
					case PathCopy:
						if _, err = f.ReadAt(buf, off); err == nil {
							_, err = dst.Write(buf)
						}
					}
					if err != nil {
						b.Fatal(err)
					}
					off += benchPayload
				}
				if st := s.Stats(); path != PathCopy && (st.LastPath != path || st.Fallbacks != 0) {
					b.Fatalf("path %v ran as %+v", path, st)
				}
			})
		}
	}
}

// BenchmarkSendAlternating compares, on one connection under the same load,
// three ways to send the 64 KiB payload behind its 16-byte header:
//
//	flat:   the frame flattened once, before the loop (the anchor);
//	writev: a Message of header buffer + shared payload buffer, WriteTo;
//	raw:    net.Buffers{header, payload} of plain slices, no Message
//	        (what writev itself costs, without the package).
//
// Each iteration sends a block of 16 messages in each mode (1 MiB), timing
// each block, in an order that rotates every iteration, so that waiting for
// the previous block's bytes still in the socket buffers falls on every mode
// equally often. (BenchmarkSend runs each mode's -count repetitions back to
// back, so on a shared machine its modes see different load; this one is
// the judge of the ratio.) It reports rate ratios summed over all blocks:
//
//	writev/flat, raw/flat          by wall-clock time;
//	cpu-writev/flat, cpu-raw/flat  by the process's CPU time (sender and
//	                               receiver), which other processes' load
//	                               barely moves.
func BenchmarkSendAlternating(b *testing.B) {
	const block = 16
	for _, network := range networks {
		b.Run(network, func(b *testing.B) {
			dst, peer := connPair(b, network)
			done := drain(peer)
			defer func() { dst.Close(); <-done }()
			pool := NewPool(benchPayload)
			hdrs, _ := NewPoolConfig(Config{Size: 1, Headroom: 64})
			payload := pool.Get()
			fill(payload.Writable(), 0xA5)
			payload.Freeze()
			defer payload.Release()
			header := make([]byte, benchHeader)
			frame := append(append([]byte{}, header...), payload.Bytes()...)
			var acct Accounting
			m := NewMessage(pool)
			m.SetHeaderPool(hdrs)
			m.SetAccounting(&acct)
			rawHeader := make([]byte, benchHeader)
			rawPayload := make([]byte, benchPayload)
			var rawVec [][]byte
			var rawBufs net.Buffers
			send := [3]func() error{
				func() error { _, err := dst.Write(frame); return err },
				func() error {
					acct.AddPayload(benchPayload)
					m.Append(payload.Ref(), 0, benchPayload)
					h, _ := m.Push(benchHeader)
					copy(h, header)
					_, err := m.WriteTo(dst)
					return err
				},
				func() error {
					rawVec = append(rawVec[:0], rawHeader, rawPayload)
					rawBufs = rawVec
					_, err := rawBufs.WriteTo(dst)
					return err
				},
			}
			var wall, cpu [3]time.Duration
			b.SetBytes(3 * block * (benchPayload + benchHeader))
			b.ReportAllocs()
			first := 0
			for b.Loop() {
				for k := range 3 {
					mode := (first + k) % 3
					t0, c0 := time.Now(), cpuTime()
					for range block {
						if err := send[mode](); err != nil {
							b.Fatal(err)
						}
					}
					wall[mode] += time.Since(t0)
					cpu[mode] += cpuTime() - c0
				}
				first = (first + 1) % 3
			}
			b.ReportMetric(float64(wall[0])/float64(wall[1]), "writev/flat")
			b.ReportMetric(float64(wall[0])/float64(wall[2]), "raw/flat")
			b.ReportMetric(float64(cpu[0])/float64(cpu[1]), "cpu-writev/flat")
			b.ReportMetric(float64(cpu[0])/float64(cpu[2]), "cpu-raw/flat")
			b.ReportMetric(acct.Snapshot().CopiesPerByte(), "copies/B")
		})
	}
}

// cpuTime returns the CPU time the process has used (all threads).
func cpuTime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		panic(err)
	}
	return time.Duration(ts.Nano())
}
