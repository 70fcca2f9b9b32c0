package checksum

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nhdkit/nhd/internal/allocs"
	"golang.org/x/sys/cpu"
)

// refChecksum is the slow reference: RFC 1071 read literally. Big-endian
// 16-bit words, a trailing odd byte padded on the right with zero, summed in a
// wide integer, then the carries folded back until 16 bits remain.
func refChecksum(b []byte, initial uint16) uint16 {
	s := uint64(initial)
	for i := 0; i+1 < len(b); i += 2 {
		s += uint64(b[i])<<8 | uint64(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint64(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}

// refFold folds a wide sum the reference way.
func refFold(s uint64) uint16 {
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}

// impls returns every implementation this machine can run: the pure-Go ones
// always, and the assembly ones the CPU supports.
func impls() []impl { return append([]impl{genericImpl, shortImpl}, archImpls()...) }

func implChecksum(im impl, b []byte, initial uint16) uint16 {
	return Combine(initial, finish(im.sum(b)))
}

// implChecksumInit is im's checksum with initial passed in (as a
// little-endian partial), or implChecksum where im has no such form.
func implChecksumInit(im impl, b []byte, initial uint16) uint16 {
	if im.checksum == nil {
		return implChecksum(im, b, initial)
	}
	return im.checksum(b, uint64(bits.ReverseBytes16(initial)))
}

func TestImplementations(t *testing.T) {
	names := []string{}
	for _, im := range impls() {
		names = append(names, im.name)
	}
	t.Logf("implementations under test: %v", names)
	// The generic paths run everywhere; on an amd64 CPU with AVX2 (and no
	// purego tag) the assembly must be among them, or the cross-checks below
	// would quietly stop covering the code that actually runs.
	want := []string{"generic", "generic-short"}
	if runtime.GOARCH == "amd64" && cpu.X86.HasAVX2 && !puregoBuild {
		want = append(want, "avx2", "avx2-nt")
	}
	if !cmp.Equal(names, want) {
		t.Errorf("implementations under test: %v, want %v", names, want)
	}
}

// TestReference pins the reference itself on hand-worked sums, so the
// cross-checks below compare against something known to be right.
func TestReference(t *testing.T) {
	tests := []struct {
		in      []byte
		initial uint16
		want    uint16
	}{
		{nil, 0, 0},
		{nil, 0x1234, 0x1234},
		{[]byte{0x12}, 0, 0x1200},
		{[]byte{0x12, 0x34}, 0, 0x1234},
		{[]byte{0xff, 0xff}, 0, 0xffff},
		{[]byte{0xff, 0xff, 0x00, 0x01}, 0, 0x0001}, // 0x10000 folds to 1
		{[]byte{0x80, 0x00, 0x80, 0x00}, 0, 0x0001}, // 0x10000 folds to 1
		{[]byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}, 0, 0xddf2},
		{[]byte{0x00, 0x00}, 0xffff, 0xffff},
	}
	for _, tt := range tests {
		if got := refChecksum(tt.in, tt.initial); got != tt.want {
			t.Errorf("refChecksum(% x, %#04x) = %#04x, want %#04x", tt.in, tt.initial, got, tt.want)
		}
	}
}

// switchLengths are lengths around the points where some implementation
// changes strategy beyond the 0..2048 sweep: the generic copy chunk and the
// assembly paths' block limits.
func switchLengths() []int {
	var ls []int
	for _, p := range []int{shortLoopMax, genericCopyChunk, 2 * genericCopyChunk, 1 << 20, maxBlock(), 2*maxBlock() + 64} {
		for _, d := range []int{-65, -64, -33, -32, -2, -1, 0, 1, 2, 31, 32, 63, 64, 65} {
			if p+d > 0 {
				ls = append(ls, p+d)
			}
		}
	}
	return ls
}

// sums answers reference queries on one buffer in constant time: RFC 1071's
// sum is the bytes at even offsets (from the start of the summed range)
// weighted 256 plus the bytes at odd offsets, so prefix sums of the bytes at
// even and at odd absolute positions give any range's sum. (refChecksum, the
// literal loop, is too slow for the multi-megabyte ranges under -race.)
type sums struct{ even, odd []uint64 }

func newSums(buf []byte) sums {
	s := sums{make([]uint64, len(buf)+1), make([]uint64, len(buf)+1)}
	for i, c := range buf {
		s.even[i+1], s.odd[i+1] = s.even[i], s.odd[i]
		if i%2 == 0 {
			s.even[i+1] += uint64(c)
		} else {
			s.odd[i+1] += uint64(c)
		}
	}
	return s
}

// checksum is refFold of the sum of buf[a:a+n] plus initial.
func (s sums) checksum(a, n int, initial uint16) uint16 {
	e, o := s.even[a+n]-s.even[a], s.odd[a+n]-s.odd[a]
	if a%2 == 1 {
		e, o = o, e
	}
	return refFold(e<<8 + o + uint64(initial))
}

func TestSumsAgainstRefChecksum(t *testing.T) {
	buf := sweepBuffers(11)["random"][:5000]
	s := newSums(buf)
	r := rand.New(rand.NewPCG(12, 13))
	for i := 0; i < 3000; i++ {
		a := r.IntN(len(buf))
		n := r.IntN(len(buf) - a + 1)
		initial := uint16(r.Uint32())
		if got, want := s.checksum(a, n, initial), refChecksum(buf[a:a+n], initial); got != want {
			t.Fatalf("sums.checksum(%d, %d, %#04x) = %#04x, refChecksum %#04x", a, n, initial, got, want)
		}
	}
}

// sweep runs check on every length 0..2048 at every start alignment 0..63 of
// buf, and on the switch lengths at a few alignments, with random initial
// values (and 0 for every seventh length). want is the reference checksum.
func sweep(t *testing.T, buf []byte, rng *rand.Rand, check func(a, n int, initial, want uint16) bool) {
	t.Helper()
	ref := newSums(buf)
	try := func(a, n int) bool {
		initial := uint16(rng.Uint32())
		if n%7 == 0 {
			initial = 0
		}
		return check(a, n, initial, ref.checksum(a, n, initial))
	}
	for a := 0; a < 64; a++ {
		for n := 0; n <= 2048; n++ {
			if !try(a, n) {
				return
			}
		}
	}
	for _, n := range switchLengths() {
		for _, a := range []int{0, 1, 7, 32, 63} {
			if !try(a, n) {
				return
			}
		}
	}
}

func sweepBuffers(seed uint64) map[string][]byte {
	n := 64 + 2*maxBlock() + 4096
	random := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range random {
		random[i] = byte(r.Uint32())
	}
	ones := bytes.Repeat([]byte{0xff}, n)
	return map[string][]byte{"random": random, "0xff": ones}
}

func TestSumAgainstReference(t *testing.T) {
	bufs := sweepBuffers(1)
	for _, im := range impls() {
		for name, buf := range bufs {
			t.Run(im.name+"/"+name, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(2, 3))
				sweep(t, buf, rng, func(a, n int, initial, want uint16) bool {
					if got := implChecksum(im, buf[a:a+n], initial); got != want {
						t.Errorf("len %d align %d initial %#04x: got %#04x, want %#04x", n, a, initial, got, want)
						return false
					}
					if got := implChecksumInit(im, buf[a:a+n], initial); got != want {
						t.Errorf("len %d align %d initial %#04x passed in: got %#04x, want %#04x", n, a, initial, got, want)
						return false
					}
					return true
				})
			})
		}
	}
}

func TestCopySumAgainstReference(t *testing.T) {
	bufs := sweepBuffers(4)
	const guard = 64
	for _, im := range impls() {
		for name, buf := range bufs {
			t.Run(im.name+"/"+name, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(5, 6))
				dstBuf := make([]byte, 64+len(buf)+guard)
				guardWant := bytes.Repeat([]byte{0xa5}, guard)
				sweep(t, buf, rng, func(a, n int, initial, want uint16) bool {
					// The destination alignment varies independently of the
					// source's, so aligned and unaligned stores both run.
					d := (a*5 + n) % 64
					dst := dstBuf[d : d+n+guard]
					guardBytes := dst[n:]
					for i := range guardBytes {
						guardBytes[i] = 0xa5
					}
					src := buf[a : a+n]
					got := Combine(initial, finish(im.copySum(dst[:n], src)))
					if got != want {
						t.Errorf("len %d align %d/%d initial %#04x: got %#04x, want %#04x", n, a, d, initial, got, want)
						return false
					}
					if im.copyChecksum != nil {
						clear(dst[:n])
						got = im.copyChecksum(dst[:n], src, uint64(bits.ReverseBytes16(initial)))
						if got != want {
							t.Errorf("len %d align %d/%d initial %#04x passed in: got %#04x, want %#04x", n, a, d, initial, got, want)
							return false
						}
					}
					if !bytes.Equal(dst[:n], src) {
						t.Errorf("len %d align %d/%d: dst differs from src", n, a, d)
						return false
					}
					if !bytes.Equal(dst[n:], guardWant) {
						t.Errorf("len %d align %d/%d: wrote past len(src)", n, a, d)
						return false
					}
					return true
				})
			})
		}
	}
}

// TestPublicFunctions checks the exported entry points (whichever
// implementation init chose) on the same kind of data.
func TestPublicFunctions(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	buf := make([]byte, 3000)
	for i := range buf {
		buf[i] = byte(r.Uint32())
	}
	dst := make([]byte, len(buf)+10)
	for n := 0; n <= len(buf); n += 1 + n/64 {
		for _, a := range []int{0, 1, 3, 8, 33} {
			if a+n > len(buf) {
				continue
			}
			b := buf[a : a+n]
			initial := uint16(r.Uint32())
			want := refChecksum(b, initial)
			if got := Checksum(b, initial); got != want {
				t.Fatalf("Checksum len %d align %d: got %#04x, want %#04x", n, a, got, want)
			}
			if got := CopyAndChecksum(dst[a:], b, initial); got != want || !bytes.Equal(dst[a:a+n], b) {
				t.Fatalf("CopyAndChecksum len %d align %d: got %#04x, want %#04x", n, a, got, want)
			}
			c := New(initial)
			c.Write(b)
			if got := c.Sum16(); got != want {
				t.Fatalf("Checksummer len %d align %d: got %#04x, want %#04x", n, a, got, want)
			}
		}
	}
}

func TestCopyAndChecksumOverlap(t *testing.T) {
	for _, n := range []int{0, 1, 31, 64, 100, 1000, 5000, genericCopyChunk + 3, 3*genericCopyChunk + 1, 300000} {
		for _, shift := range []int{-257, -33, -1, 1, 2, 31, 64, 1000} {
			base := make([]byte, n+2000)
			r := rand.New(rand.NewPCG(uint64(n), uint64(shift+5000)))
			for i := range base {
				base[i] = byte(r.Uint32())
			}
			want := bytes.Clone(base)
			so := 1000
			do := so + shift
			copy(want[do:do+n], want[so:so+n])
			wantSum := refChecksum(want[do:do+n], 0x55)
			got := CopyAndChecksum(base[do:], base[so:so+n], 0x55)
			if got != wantSum || !bytes.Equal(base, want) {
				t.Errorf("len %d shift %d: sum %#04x want %#04x, bytes equal %v", n, shift, got, wantSum, bytes.Equal(base, want))
			}
		}
	}
}

// TestCopyAndChecksumLarge runs the exported copy at the lengths around the
// switch to non-temporal stores on amd64 (8 MiB), with odd alignments.
func TestCopyAndChecksumLarge(t *testing.T) {
	const big = 8 << 20
	src := make([]byte, big+300)
	r := rand.New(rand.NewPCG(14, 15))
	for i := range src {
		src[i] = byte(r.Uint32())
	}
	dst := make([]byte, len(src)+8)
	for _, n := range []int{big - 1, big, big + 129} {
		got := CopyAndChecksum(dst[3:], src[1:1+n], 0x0102)
		if want := refChecksum(src[1:1+n], 0x0102); got != want || !bytes.Equal(dst[3:3+n], src[1:1+n]) {
			t.Errorf("len %d: %#04x, want %#04x (copied right: %v)", n, got, want, bytes.Equal(dst[3:3+n], src[1:1+n]))
		}
	}
}

func TestCopyAndChecksumShortDst(t *testing.T) {
	defer func() {
		if r := recover(); r == nil {
			t.Error("CopyAndChecksum with short dst did not panic")
		}
	}()
	CopyAndChecksum(make([]byte, 3), make([]byte, 4), 0)
}

func TestCopyAndWriteShortDst(t *testing.T) {
	defer func() {
		if r := recover(); r == nil {
			t.Error("CopyAndWrite with short dst did not panic")
		}
	}()
	New(0).CopyAndWrite(make([]byte, 3), make([]byte, 4))
}

func TestCopyAndChecksumLongDst(t *testing.T) {
	dst := bytes.Repeat([]byte{0xee}, 10)
	src := []byte{1, 2, 3}
	if got, want := CopyAndChecksum(dst, src, 0), refChecksum(src, 0); got != want {
		t.Errorf("got %#04x, want %#04x", got, want)
	}
	if want := []byte{1, 2, 3, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee}; !bytes.Equal(dst, want) {
		t.Errorf("dst = % x, want % x", dst, want)
	}
}

// Golden vectors.

// TestRFC1071Example is the worked example of RFC 1071 section 3: the bytes
// 00 01 f2 03 f4 f5 f6 f7 sum to 0xddf2 (in 16-bit words 0001 + f203 + f4f5 +
// f6f7 = 2ddf0, and the carry 2 folds back in).
func TestRFC1071Example(t *testing.T) {
	b := []byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}
	const want = 0xddf2
	if got := Checksum(b, 0); got != want {
		t.Errorf("Checksum = %#04x, want %#04x", got, want)
	}
	for _, im := range impls() {
		if got := implChecksum(im, b, 0); got != want {
			t.Errorf("%s: %#04x, want %#04x", im.name, got, want)
		}
	}
	// The RFC also shows the sum is the same computed on swapped bytes and
	// swapped back (section 2(B)), and in pieces (section 2(C)).
	if got := CombineOdd(Checksum(b[:3], 0), Checksum(b[3:], 0)); got != want {
		t.Errorf("odd split: %#04x, want %#04x", got, want)
	}
}

// capturedSegment is a real IPv4 packet, a TCP ACK with timestamp options and
// no payload, from 172.22.104.109 port 44831 to 74.125.159.103 port 80, as
// captured and printed in hex on Mark Mayfield's TCP/IP header table page
// (mark.kandm-solutions.com, "headertable", checksum section, 2009). Both
// checksums are as they were on the wire: IPv4 header 0x4eb6, TCP 0x37a6.
var capturedSegment = []byte{
	// IPv4 header, 20 bytes.
	0x45, 0x00, 0x00, 0x34, 0xed, 0xa5, 0x40, 0x00,
	0x40, 0x06, 0x4e, 0xb6, // TTL 64, protocol 6 (TCP), header checksum
	0xac, 0x16, 0x68, 0x6d, // source 172.22.104.109
	0x4a, 0x7d, 0x9f, 0x67, // destination 74.125.159.103
	// TCP header, 32 bytes (data offset 8).
	0xaf, 0x1f, 0x00, 0x50, // ports 44831 -> 80
	0xe8, 0x33, 0x8b, 0x62, // sequence number
	0xfc, 0x13, 0xda, 0x66, // acknowledgment number
	0x80, 0x10, 0x00, 0x5c, // data offset 8, ACK, window 92
	0x37, 0xa6, 0x00, 0x00, // checksum, urgent pointer
	0x01, 0x01, 0x08, 0x0a, 0x04, 0xb8, 0x66, 0xf7, 0x4a, 0xdd, 0x90, 0x45, // NOP NOP timestamps
}

// wikipediaIPv4Header is the IPv4 header worked in Wikipedia's "Internet
// checksum" / "IPv4 header checksum" article: 192.168.0.1 to 192.168.0.199,
// UDP, checksum field b861.
var wikipediaIPv4Header = []byte{
	0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
	0xb8, 0x61, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
}

// fieldFor computes the value to store in the checksum field at off: the
// complement of the sum with the field zeroed.
func fieldFor(b []byte, off int, initial uint16) uint16 {
	z := bytes.Clone(b)
	z[off], z[off+1] = 0, 0
	return ^Checksum(z, initial)
}

func TestGoldenIPv4Headers(t *testing.T) {
	tests := []struct {
		name   string
		header []byte
		field  uint16
	}{
		{"captured", capturedSegment[:20], 0x4eb6},
		{"wikipedia", wikipediaIPv4Header, 0xb861},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !Verify(tt.header, 0) {
				t.Errorf("Verify(header) = false, sum %#04x", Checksum(tt.header, 0))
			}
			if got := fieldFor(tt.header, 10, 0); got != tt.field {
				t.Errorf("computed field %#04x, on the wire %#04x", got, tt.field)
			}
			bad := bytes.Clone(tt.header)
			bad[8]-- // TTL decremented without updating the checksum
			if Verify(bad, 0) {
				t.Error("Verify accepted a header with a stale checksum")
			}
			// A router decrements TTL and updates the checksum with RFC 1624.
			old := binary.BigEndian.Uint16(bad[8:])
			newField := Update(tt.field, old+0x100, old)
			binary.BigEndian.PutUint16(bad[10:], newField)
			if !Verify(bad, 0) {
				t.Errorf("after TTL decrement and Update, Verify = false (field %#04x)", newField)
			}
			if want := fieldFor(bad, 10, 0); newField != want {
				t.Errorf("Update gave %#04x, recomputation %#04x", newField, want)
			}
		})
	}
}

func TestGoldenTCPSegment(t *testing.T) {
	ip, tcp := capturedSegment[:20], capturedSegment[20:]
	src, dst := [4]byte(ip[12:16]), [4]byte(ip[16:20])
	ph := PseudoHeaderIPv4(src, dst, ProtocolTCP, uint16(len(tcp)))
	// The pseudo-header sum worked by hand: ac16 + 686d + 4a7d + 9f67 +
	// 0006 + 0020 = 0x1_fe8d -> fe8e.
	if ph != 0xfe8e {
		t.Errorf("PseudoHeaderIPv4 = %#04x, want 0xfe8e", ph)
	}
	if !Verify(tcp, ph) {
		t.Errorf("Verify(tcp, pseudo-header) = false, sum %#04x", Checksum(tcp, ph))
	}
	if got := fieldFor(tcp, 16, ph); got != 0x37a6 {
		t.Errorf("computed TCP checksum %#04x, on the wire 0x37a6", got)
	}
	c := New(ph)
	for _, chunk := range [][]byte{tcp[:5], tcp[5:6], tcp[6:19], tcp[19:]} {
		c.Write(chunk)
	}
	if got := c.Sum16(); got != 0xffff {
		t.Errorf("Checksummer over chunks: %#04x, want 0xffff", got)
	}
	if Verify(tcp, PseudoHeaderIPv4(src, [4]byte{74, 125, 159, 104}, ProtocolTCP, uint16(len(tcp)))) {
		t.Error("Verify accepted the segment against the wrong destination address")
	}
}

// refPseudoHeader builds the pseudo-header bytes of RFC 9293 section 3.1 and
// RFC 8200 section 8.1 literally and sums them with the reference.
func refPseudoHeader(src, dst []byte, proto uint8, length uint32) uint16 {
	var b []byte
	b = append(b, src...)
	b = append(b, dst...)
	if len(src) == 4 {
		b = append(b, 0, proto)
		b = binary.BigEndian.AppendUint16(b, uint16(length))
	} else {
		b = binary.BigEndian.AppendUint32(b, length)
		b = append(b, 0, 0, 0, proto)
	}
	return refChecksum(b, 0)
}

func TestPseudoHeaders(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for i := 0; i < 2000; i++ {
		var s4, d4 [4]byte
		var s6, d6 [16]byte
		binary.BigEndian.PutUint32(s4[:], r.Uint32())
		binary.BigEndian.PutUint32(d4[:], r.Uint32())
		for j := range s6 {
			s6[j], d6[j] = byte(r.Uint32()), byte(r.Uint32())
		}
		if i == 0 {
			s4, d4, s6, d6 = [4]byte{0xff, 0xff, 0xff, 0xff}, [4]byte{0xff, 0xff, 0xff, 0xff}, [16]byte{}, [16]byte{}
			for j := range s6 {
				s6[j], d6[j] = 0xff, 0xff
			}
		}
		proto := uint8(r.Uint32())
		l := r.Uint32()
		if got, want := PseudoHeaderIPv4(s4, d4, proto, uint16(l)), refPseudoHeader(s4[:], d4[:], proto, uint32(uint16(l))); got != want {
			t.Fatalf("PseudoHeaderIPv4(%v, %v, %d, %d) = %#04x, want %#04x", s4, d4, proto, uint16(l), got, want)
		}
		if got, want := PseudoHeaderIPv6(s6, d6, proto, l), refPseudoHeader(s6[:], d6[:], proto, l); got != want {
			t.Fatalf("PseudoHeaderIPv6(%x, %x, %d, %d) = %#04x, want %#04x", s6, d6, proto, l, got, want)
		}
	}
}

func TestCombine(t *testing.T) {
	tests := []struct{ a, b, want uint16 }{
		{0, 0, 0},
		{0, 0xffff, 0xffff},
		{0xffff, 0xffff, 0xffff},
		{0x8000, 0x8000, 0x0001},
		{0x1234, 0x4321, 0x5555},
		{0xfffe, 0x0001, 0xffff},
		{0xfffe, 0x0002, 0x0001},
	}
	for _, tt := range tests {
		if got := Combine(tt.a, tt.b); got != tt.want {
			t.Errorf("Combine(%#04x, %#04x) = %#04x, want %#04x", tt.a, tt.b, got, tt.want)
		}
	}
	if got := CombineOdd(0x0100, 0x1234); got != 0x3512 {
		t.Errorf("CombineOdd(0x0100, 0x1234) = %#04x, want 0x3512", got)
	}
	for _, off := range []int{-3, -2, 0, 1, 2, 5} {
		want := Combine(0x0100, 0x1234)
		if off&1 != 0 {
			want = 0x3512
		}
		if got := CombineAt(0x0100, 0x1234, off); got != want {
			t.Errorf("CombineAt(.., %d) = %#04x, want %#04x", off, got, want)
		}
	}
}

// TestUpdateRFC1624 replays the example of RFC 1624 section 3: a header whose
// other words sum to 0xcd7a, one word changing from 0x5555 to 0x3285, for which
// recomputation gives 0x0000 and equation 3 gives the same.
func TestUpdateRFC1624(t *testing.T) {
	// The data: a word that sums with the 0x5555 to 0xcd7a + 0x5555, checksum
	// field, and the changing word.
	data := []byte{0xcd, 0x7a, 0x00, 0x00, 0x55, 0x55}
	field := fieldFor(data, 2, 0)
	if want := ^refChecksum([]byte{0xcd, 0x7a, 0x55, 0x55}, 0); field != want {
		t.Fatalf("setup: field %#04x, want %#04x", field, want)
	}
	data[4], data[5] = 0x32, 0x85
	got := Update(field, 0x5555, 0x3285)
	if want := fieldFor(data, 2, 0); got != want {
		t.Errorf("Update = %#04x, recomputation %#04x", got, want)
	}
	if got != 0x0000 {
		t.Errorf("Update = %#04x, RFC 1624 gives 0x0000", got)
	}
	binary.BigEndian.PutUint16(data[2:], got)
	if !Verify(data, 0) {
		t.Error("Verify failed after Update")
	}
}

func TestVerify(t *testing.T) {
	for _, tt := range []struct {
		b    []byte
		want bool
	}{
		{nil, false},
		{[]byte{0, 0}, false},
		{[]byte{0xff, 0xff}, true},
		{[]byte{0x12, 0x34, 0xed, 0xcb}, true},
		{[]byte{0x12, 0x34, 0xed, 0xca}, false},
		{[]byte{0x12, 0x34, 0xed}, false},
		{[]byte{0x12, 0x34, 0xed, 0xcb, 0x00}, true}, // a trailing zero pad changes nothing
	} {
		if got := Verify(tt.b, 0); got != tt.want {
			t.Errorf("Verify(% x) = %v, want %v", tt.b, got, tt.want)
		}
	}
}

func TestAllocs(t *testing.T) {
	b := make([]byte, 70000)
	d := make([]byte, len(b))
	c := New(0)
	out := make([]byte, 0, 2)
	for name, f := range map[string]func(){
		"Checksum":        func() { Checksum(b, 1) },
		"CopyAndChecksum": func() { CopyAndChecksum(d, b, 1) },
		"Write":           func() { c.Write(b[1:]) },
		"CopyAndWrite":    func() { c.CopyAndWrite(d, b[1:]) },
		"Sum":             func() { out = c.Sum(out[:0]) },
	} {
		if n := allocs.PerRun(1000, f); n > allocs.Slack {
			t.Errorf("%s: %v allocations per call, want 0", name, n)
		}
	}
}
