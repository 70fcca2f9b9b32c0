package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nhdkit/nhd/ata"
	"github.com/nhdkit/nhd/bridge"
	"github.com/nhdkit/nhd/internal/testenv"
	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nbd/nbdtest"
)

// TestMain lets a test run the real main in a child process, to check the
// exit code and what lands on stderr.
func TestMain(m *testing.M) {
	if os.Getenv("NHD_TEST_MAIN") == "1" {
		os.Args = append([]string{"nhd"}, strings.Fields(os.Getenv("NHD_TEST_ARGS"))...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// small keeps a run to a fraction of a second: a 4 MiB span, a few
// commands per phase and per Table 4 node.
var small = []string{"-size", "64m", "-span", "4m", "-bytes", "1m"}

func runArgs(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, &out, &errb)
	if errb.Len() > 0 {
		t.Errorf("stderr is not a terminal, yet run wrote to it: %q", errb.String())
	}
	return out.String(), err
}

// testBridge assembles variant v with the default flags' tuning, closed
// when the test ends.
func testBridge(t testing.TB, v bridge.Variant, be ata.Backend, sectors uint64, bs int) *bridge.Bridge {
	t.Helper()
	c, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.newBridge(v, be, sectors, bs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// TestDefaultReport runs the default workload against the in-process server
// and checks the report's shape: every phase, every Table 4 row, numbers
// where numbers belong, and verification on every command.
func TestDefaultReport(t *testing.T) {
	out, err := runArgs(t, small...)
	if err != nil {
		t.Fatal(err)
	}
	flat := regexp.MustCompile(`[ \t]+`).ReplaceAllString(out, " ")
	num := `[0-9]+(\.[0-9]+)?`
	rows := []string{
		// phase block commands MB/s IOPS ... verified (commands == verified)
		`fill 64 KiB 64 ` + num + ` ` + num + ` - - ` + num + ` ` + num + ` 64`,
		`seq64k-write 64 KiB 16 ` + num + ` ` + num + ` - - ` + num + ` ` + num + ` 16`,
		`seq64k-read 64 KiB 16 ` + num + ` ` + num + ` ` + num + ` ` + num + ` - - 16`,
		`rand64k-write 64 KiB 16 `,
		`rand64k-read 64 KiB 16 `,
		`Table 4 on this machine: 64 KiB sequential`,
		`read store-and-forward ` + num + ` ` + num + ` ` + num + ` series ` + num + ` [-+]` + num + `%`,
		`\+ DMA streaming ` + num + ` ` + num + ` ` + num + ` series ` + num + ` [-+]` + num + `% x` + num,
		`\+ zero-copy ` + num + ` ` + num + ` ` + num + ` series ` + num + ` [-+]` + num + `% x` + num,
		`\+ checksum in flight ` + num + ` ` + num + ` ` + num + ` series ` + num + ` [-+]` + num + `% x` + num,
		`\+ pipelined in chunks ` + num + ` ` + num + ` ` + num + ` fill ` + num + ` [-+]` + num + `% x` + num,
		`\+ pipelined across commands ` + num + ` ` + num + ` ` + num + ` series ` + num + ` [-+]` + num + `% x` + num,
		`write store-and-forward ` + num,
		`read: before -> after \(series\) x` + num + `; pipelined vs series x` + num + ` in chunks, x` + num + ` across commands; without the host's work, the fastest \([a-z -]+\) reaches ` + num + `% of the bare NBD client's ` + num + ` MB/s one request at a time; across commands, ` + num + `% of its ` + num + ` MB/s with 3 in flight \(the slower end alone, with a processor for each end, would give ` + num + `\)`,
		`write: before -> after \(series\) x` + num,
		`read: pipelining in 32 KiB chunks makes 2 NBD requests of one, in flight together: (each more costs ` + num + ` us \(fitted\), to hide at most ` + num + ` us of front end|their cost per request was not fitted \(the chunks came out cheaper per byte than whole commands: a noisy run\))`,
		`model error: worst ` + num + `% over 12 rows`,
	}
	for _, r := range rows {
		if !regexp.MustCompile(`(?m)(^| )` + r).MatchString(flat) {
			t.Errorf("report lacks %q\n%s", r, out)
		}
	}
}

// TestJSON checks the machine-readable report: every command of every
// phase verified, every Table 4 row with its measurements.
func TestJSON(t *testing.T) {
	out, err := runArgs(t, append([]string{"-json", "-depth", "2"}, small...)...)
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	var names []string
	for _, p := range rep.Phases {
		names = append(names, p.Name)
		if p.Ops == 0 || p.Verified != p.Ops || p.Bytes != p.Ops*int64(p.BlockSize) || p.Depth != 2 {
			t.Errorf("phase %s: %d commands, %d verified, %d bytes, depth %d", p.Name, p.Ops, p.Verified, p.Bytes, p.Depth)
		}
	}
	if diff := cmp.Diff([]string{"fill", "seq64k-write", "seq64k-read", "rand64k-write", "rand64k-read"}, names); diff != "" {
		t.Errorf("phases (-want +got):\n%s", diff)
	}
	if rep.Table == nil || len(rep.Table.Rows) != 2*len(bridge.Table4()) {
		t.Fatalf("table: %+v", rep.Table)
	}
	for _, r := range rep.Table.Rows {
		if r.Front <= 0 || r.Back <= 0 || r.Model <= 0 || r.Measured <= 0 || r.Verified == 0 {
			t.Errorf("row %s %s: %+v", r.Dir, r.Variant.Name, r)
		}
	}
	if b := rep.Bridge; !b.Streaming || !b.ZeroCopy || !b.ChecksumInFlight || b.Pipelining != bridge.Series {
		t.Errorf("the workload's bridge is %+v, want streaming, zero-copy, checksum in flight, in series", rep.Bridge)
	}
}

// TestWorkloads runs the other workloads, at depth, without the table.
func TestWorkloads(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		phases []string
		want   []string
	}{
		{[]string{"-workload", "rand4k", "-depth", "3"}, []string{"fill", "rand4k-write", "rand4k-read"}, nil},
		{[]string{"-workload", "randrw70", "-depth", "4"}, []string{"fill", "randrw70"},
			[]string{`QoS of randrw70: read p99 \d+ us \(limit 1000\): (met|NOT met); write p99 \d+ us \(limit 200\): (met|NOT met)`}},
		{[]string{"-workload", "bs=8k,read=50,rand"}, []string{"fill", "bs=8k,read=50,rand"}, nil},
		{[]string{"-workload", "bs=16k,read=50,seq", "-pipelined", "-depth", "2"}, []string{"fill", "bs=16k,read=50,seq"}, nil},
		{[]string{"-workload", "randrw70", "-pipelined"}, []string{"fill", "randrw70"}, nil},
		{[]string{"-workload", "bs=1m,read=100,seq", "-depth", "2", "-pipelined", "-chunk", "256k"}, []string{"fill", "bs=1m,read=100,seq"}, nil},
		{[]string{"-workload", "bs=64k,read=50,seq", "-pipelined", "-ahead", "1", "-overlap"}, []string{"fill", "bs=64k,read=50,seq"}, nil},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, err := runArgs(t, append(append(tc.args, "-table=false", "-json"), small...)...)
			if err != nil {
				t.Fatal(err)
			}
			var rep report
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, p := range rep.Phases {
				names = append(names, p.Name)
				if p.Ops == 0 || p.Verified != p.Ops {
					t.Errorf("phase %s: %d commands, %d verified", p.Name, p.Ops, p.Verified)
				}
			}
			if diff := cmp.Diff(tc.phases, names); diff != "" {
				t.Errorf("phases (-want +got):\n%s", diff)
			}
			if rep.Table != nil {
				t.Error("-table=false still measured the table")
			}
			if len(tc.want) > 0 {
				text, err := runArgs(t, append(append(tc.args, "-table=false"), small...)...)
				if err != nil {
					t.Fatal(err)
				}
				for _, w := range tc.want {
					if !regexp.MustCompile(w).MatchString(text) {
						t.Errorf("text report lacks %q:\n%s", w, text)
					}
				}
			}
		})
	}
}

// TestOtherServer runs the bridge against a server given by -uri.
func TestOtherServer(t *testing.T) {
	srv := nbdtest.Start(t, nbdtest.WithSize(8<<20), nbdtest.WithTCP())
	out, err := runArgs(t, "-uri", srv.URI, "-span", "4m", "-bytes", "256k", "-table=false", "-json")
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Server != srv.URI || rep.DiskSize != 8<<20 || len(rep.Phases) != 5 {
		t.Errorf("server %q, size %d, %d phases", rep.Server, rep.DiskSize, len(rep.Phases))
	}
	// What the bridge wrote is on the server's disk: block 3 of the span
	// carries its stamp.
	buf := make([]byte, 64<<10)
	if _, err := srv.Disk.ReadAt(buf, 3*64<<10); err != nil {
		t.Fatal(err)
	}
	if got := string(buf[:8]); got != "\x03\x00\x00\x00\x00\x00\x00\x00" {
		t.Errorf("block 3 on the server starts %q, want its stamp", got)
	}
	// A span the export cannot hold is an error, not a smaller span.
	_, err = runArgs(t, "-uri", srv.URI, "-span", "16m", "-bytes", "256k", "-table=false")
	if want := "-span 16777216 is larger than the disk (8388608 bytes)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("-span 16m on an 8 MiB export: %v, want %q", err, want)
	}
}

// TestBadInput checks that bad flags and an unreachable server fail with
// one clear line.
func TestBadInput(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		usage bool
		want  string
	}{
		{[]string{"-nosuch"}, true, "flag provided but not defined: -nosuch"},
		{[]string{"-workload", "seq128k"}, true, `unknown workload "seq128k"`},
		{[]string{"-workload", "bs=7,read=50"}, true, "bs must be a multiple of 512"},
		{[]string{"-workload", "bs=4k,read=150"}, true, "read must be a percentage"},
		{[]string{"-workload", "bs=4k,write=5"}, true, `unknown field "write"`},
		{[]string{"-depth", "0"}, true, "-depth must be 1..256"},
		{[]string{"-duration", "-1s"}, true, "-duration must be positive"},
		{[]string{"-bytes", "lots"}, true, `-bytes "lots"`},
		{[]string{"-bytes", "1m", "-duration", "1s"}, true, "-bytes and -duration both set"},
		{[]string{"-size", "1000"}, true, "-size must be a multiple of 512"},
		{[]string{"-span", "1000"}, true, "-span 1000 holds fewer than -depth 1 blocks of 65536 bytes"},
		{[]string{"-size", "1m", "-depth", "17"}, true, "-span 1048576 holds fewer than -depth 17 blocks"},
		{[]string{"-span", "10g"}, true, "-span 10737418240 is larger than the disk (-size 4294967296)"},
		{[]string{"-chunk", "1000"}, true, "-chunk"},
		{[]string{"-ahead", "0"}, true, "-ahead must be 1 to 16, got 0"},
		{[]string{"-ahead", "17"}, true, "-ahead must be 1 to 16, got 17"},
		{[]string{"extra"}, true, `unexpected argument "extra"`},
		{[]string{"-uri", "nbd+unix:///x?socket=/nonexistent/nhd.sock"}, false, "cannot connect to NBD server nbd+unix:///x?socket=/nonexistent/nhd.sock"},
		{[]string{"-uri", "http://example.com/"}, true, "-uri: nbd: bad URI"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, err := runArgs(t, tc.args...)
			if err == nil {
				t.Fatal("no error")
			}
			if msg := err.Error(); !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") {
				t.Errorf("error %q, want one line containing %q", msg, tc.want)
			}
			if errors.Is(err, errUsage) != tc.usage {
				t.Errorf("errors.Is(err, errUsage) = %v, want %v", !tc.usage, tc.usage)
			}
		})
	}
}

// TestExitStatus runs the real main in a child process: bad flags exit 2,
// an unreachable server 1, each with one line on stderr and nothing on
// stdout.
func TestExitStatus(t *testing.T) {
	for _, tc := range []struct {
		args string
		code int
	}{
		{"-depth 0", 2},
		{"-uri nbd+unix:///x?socket=/nonexistent/nhd.sock", 1},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "NHD_TEST_MAIN=1", "NHD_TEST_ARGS="+tc.args)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != tc.code {
			t.Errorf("%s: %v, want exit status %d", tc.args, err, tc.code)
		}
		if lines := strings.Count(errb.String(), "\n"); lines != 1 || !strings.HasPrefix(errb.String(), "nhd: ") {
			t.Errorf("%s: stderr %q, want one line starting \"nhd: \"", tc.args, errb.String())
		}
		if out.Len() != 0 {
			t.Errorf("%s: stdout %q, want nothing", tc.args, out.String())
		}
	}
}

// corrupt is a backend that flips one byte of every read at flipAt.
type corrupt struct {
	*nbd.MemDisk
	flipAt int64
}

func (c corrupt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.MemDisk.ReadAt(p, off)
	if i := c.flipAt - off; i >= 0 && i < int64(n) {
		p[i] ^= 0x40
	}
	return n, err
}

// failing is a backend whose writes at failAt fail with EIO.
type failing struct {
	*nbd.MemDisk
	failAt int64
}

func (f failing) WriteAt(p []byte, off int64) (int, error) {
	if f.failAt >= off && f.failAt < off+int64(len(p)) {
		return 0, syscall.EIO
	}
	return f.MemDisk.WriteAt(p, off)
}

// TestWriteBehind checks the pipelined bridge's write cache: a write
// completes before the back end has it, a read of the same block still sees
// it, a failed write behind is reported by the next command, and FLUSH
// CACHE waits for the write behind.
func TestWriteBehind(t *testing.T) {
	const bs = 4096
	md := nbd.NewMemDisk(1 << 20)
	d := testBridge(t, bridgeFor(true), failing{md, 7 * bs}, (1<<20)/512, bs)
	w, r := bytes.Repeat([]byte{0xA5}, bs), make([]byte, bs)
	if err := d.Write(w, 3*bs); err != nil {
		t.Fatal(err)
	}
	if err := d.Read(r, 3*bs); err != nil || !bytes.Equal(r, w) {
		t.Fatalf("read after write: %v, data equal %v", err, bytes.Equal(r, w))
	}
	if err := d.Write(w, 7*bs); err != nil {
		t.Fatalf("the write behind should complete before the back end fails it: %v", err)
	}
	var ae *ata.Error
	var oe *ata.OffsetError
	if err := d.Read(r, 0); !errors.As(err, &ae) || ae.LBA != 7*bs/512 || !errors.As(err, &oe) || oe.Off != 7*bs || !errors.Is(err, syscall.EIO) {
		t.Fatalf("the command after a failed write behind: %v, want an ATA error at its LBA carrying the deferred one", err)
	}
	if err := d.Write(w, 9*bs); err != nil {
		t.Fatal(err)
	}
	if err := d.Flush(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, bs)
	md.ReadAt(got, 9*bs)
	if !bytes.Equal(got, w) {
		t.Error("after FLUSH CACHE the back end does not hold the last write")
	}
}

// TestVerificationCatchesCorruption shows that the workload's checks are
// not a formality: a byte changed under the bridge fails the run, for every
// datapath variant, naming the block.
func TestVerificationCatchesCorruption(t *testing.T) {
	const bs, span = 64 << 10, 1 << 20
	for _, v := range bridge.Table4() {
		t.Run(v.Name, func(t *testing.T) {
			md := nbd.NewMemDisk(span)
			d := testBridge(t, v, corrupt{md, 5*bs + 1000}, span/512, bs)
			dk := newDisk(span, bs, 1)
			l := newLane(d, dk, 0, 1, 1)
			ctx := context.Background()
			if _, err := runPhase(ctx, []*lane{l}, Workload{Name: "fill", BlockSize: bs}, budget{ops: span / bs}); err != nil {
				t.Fatal(err)
			}
			_, err := runPhase(ctx, []*lane{l}, Workload{Name: "read", BlockSize: bs, ReadPct: 100}, budget{ops: span / bs})
			if err == nil || !strings.Contains(err.Error(), "block 5") {
				t.Fatalf("reading a corrupted block: %v, want an error naming block 5", err)
			}
		})
	}
}

func TestParseWorkload(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []Workload
	}{
		{"randrw70", []Workload{{Name: "randrw70", BlockSize: 4096, ReadPct: 70, Random: true, ReadP99: 1000, WriteP99: 200}}},
		{"bs=16k,read=70,rand", []Workload{{Name: "bs=16k,read=70,rand", BlockSize: 16384, ReadPct: 70, Random: true}}},
		{"read=0,bs=512,seq", []Workload{{Name: "read=0,bs=512,seq", BlockSize: 512}}},
		{"bs=1m", []Workload{{Name: "bs=1m", BlockSize: 1 << 20, ReadPct: 100}}},
	} {
		got, err := parseWorkload(tc.in)
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.in, diff)
		}
	}
	for _, in := range []string{"", "seq", "bs=0", "bs=64k,read=-1", "bs=64m", "bs=4k,rand=1"} {
		if _, err := parseWorkload(in); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
	for in, want := range map[string]int64{"4096": 4096, "4k": 4096, "64K": 65536, "1m": 1 << 20, "2G": 2 << 30} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v, want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "k", "-4k", "0", "1.5m", "4x"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q): no error", in)
		}
	}
}

// TestNbdkit runs the bridge against nbdkit's memory plugin through -uri.
func TestNbdkit(t *testing.T) {
	p, uri := testenv.Nbdkit(t, "memory", "size=16M")
	out, err := runArgs(t, "-uri", uri, "-span", "4m", "-bytes", "512k", "-workload", "randrw70", "-depth", "2", "-table=false", "-json")
	if err != nil {
		t.Fatalf("%v\nnbdkit: %s", err, p.Output())
	}
	var rep report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.DiskSize != 16<<20 || len(rep.Phases) != 2 || rep.Phases[1].Verified == 0 || rep.Phases[1].Verified != rep.Phases[1].Ops {
		t.Errorf("size %d, phases %+v", rep.DiskSize, rep.Phases)
	}
}

// TestInterrupted checks that a run stopped midway reports the phases it
// finished before its error.
func TestInterrupted(t *testing.T) {
	// The fill phase (16 commands) ends in milliseconds even under -race on
	// a loaded machine; the next phase would run 60 s, so the deadline
	// lands inside it.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var out bytes.Buffer
	err := run(ctx, []string{"-size", "64m", "-span", "1m", "-duration", "60s"}, &out, io.Discard)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("run: %v, want the context's error", err)
	}
	if !regexp.MustCompile(`(?m)^ +fill +64 KiB +16 `).MatchString(out.String()) {
		t.Errorf("the report of the interrupted run lacks the finished fill phase:\n%s", out.String())
	}
}
