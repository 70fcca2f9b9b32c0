package main

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nhdkit/nhd/internal/testenv"
	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nbd/nbdtest"
)

const testSize = 4 << 20

// testImage writes a sparse file of testSize with random data in about
// half its 64 KiB blocks and returns its path and bytes.
func testImage(t *testing.T, seed uint64) (string, []byte) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 2))
	want := make([]byte, testSize)
	for off := 0; off < testSize; off += 64 << 10 {
		if r.IntN(2) == 0 {
			for i := off; i < off+64<<10; i++ {
				want[i] = byte(r.Uint32())
			}
		}
	}
	path := filepath.Join(t.TempDir(), "src.img")
	d, err := nbd.CreateFileDisk(path, testSize, nbd.FileDiskOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < testSize; off += 64 << 10 {
		if blk := want[off : off+64<<10]; !bytes.Equal(blk, make([]byte, len(blk))) {
			if _, err := d.WriteAt(blk, int64(off)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	return path, want
}

func runOK(t *testing.T, args ...string) string {
	t.Helper()
	var stderr bytes.Buffer
	if err := run(context.Background(), args, &stderr); err != nil {
		t.Fatalf("nbdcopy %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stderr.String()
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFileToNBDToFile: a file up to an export (dirty: holes are zeroed),
// and back down into a new file, with several connections and requests.
func TestFileToNBDToFile(t *testing.T) {
	src, want := testImage(t, 1)
	srv := nbdtest.Start(t, nbdtest.WithSize(testSize))
	if _, err := srv.Disk.WriteAt(bytes.Repeat([]byte{0xaa}, testSize), 0); err != nil {
		t.Fatal(err)
	}
	runOK(t, "-requests", "4", "-request-size", "64k", src, srv.URI)
	got := make([]byte, testSize)
	if _, err := srv.Disk.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the export differs from the file copied into it")
	}
	out := filepath.Join(t.TempDir(), "out.img")
	log := runOK(t, "-connections", "2", "-flush", "-progress", srv.URI, out)
	if !bytes.Equal(readFile(t, out), want) {
		t.Fatal("the new file differs from the export")
	}
	if !strings.Contains(log, "copied 4194304 of 4194304 bytes") || !strings.Contains(log, "skipped") {
		t.Errorf("progress summary:\n%s", log)
	}
}

// TestFileToExistingFile: an existing destination is not known to be
// zero: its bytes under the source's holes are zeroed.
func TestFileToExistingFile(t *testing.T) {
	src, want := testImage(t, 2)
	dst := filepath.Join(t.TempDir(), "dst.img")
	if err := os.WriteFile(dst, bytes.Repeat([]byte{0x55}, testSize+10), 0o644); err != nil {
		t.Fatal(err)
	}
	runOK(t, src, dst)
	got := readFile(t, dst)
	if !bytes.Equal(got[:testSize], want) || !bytes.Equal(got[testSize:], bytes.Repeat([]byte{0x55}, 10)) {
		t.Fatal("the destination does not hold the source followed by its old tail")
	}
	// -destination-is-zero believes the caller: the holes stay dirty.
	if err := os.WriteFile(dst, bytes.Repeat([]byte{0x55}, testSize), 0o644); err != nil {
		t.Fatal(err)
	}
	runOK(t, "-destination-is-zero", src, dst)
	if bytes.Equal(readFile(t, dst), want) {
		t.Fatal("-destination-is-zero wrote the holes")
	}
}

func TestErrors(t *testing.T) {
	src, _ := testImage(t, 3)
	dir := t.TempDir()
	small := filepath.Join(dir, "small.img")
	if err := os.WriteFile(small, make([]byte, 100), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		args  []string
		usage bool
		want  string
	}{
		{"one argument", []string{src}, true, "want SOURCE and DESTINATION"},
		{"bad flag", []string{"-requests", "0", src, small}, true, "at least 1"},
		{"bad size", []string{"-request-size", "2g", src, small}, true, "-request-size"},
		{"no source", []string{filepath.Join(dir, "none"), small}, false, "no such file"},
		{"bad URI", []string{"nbd+unix:///x", small}, false, "needs ?socket"},
		{"unreachable", []string{"nbd+unix:///?socket=" + filepath.Join(dir, "no.sock"), small}, false, "no.sock"},
		{"small destination", []string{src, small}, false, "smaller than its source"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			err := run(context.Background(), tc.args, &stderr)
			if err == nil {
				t.Fatal("no error")
			}
			if _, ok := errors.AsType[usageError](err); ok != tc.usage {
				t.Errorf("%v: usage error %v, want %v", err, ok, tc.usage)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") {
				t.Errorf("error %q: want one line with %q", msg, tc.want)
			}
		})
	}
}

// TestSameAsNbdcopy copies one export with libnbd's nbdcopy and with this
// command: the two files are equal.
func TestSameAsNbdcopy(t *testing.T) {
	nbdcopy := testenv.Need(t, "nbdcopy", "libnbd-bin")
	src, want := testImage(t, 4)
	srv := nbdtest.Start(t, nbdtest.WithSize(testSize))
	runOK(t, src, srv.URI)
	theirs := filepath.Join(t.TempDir(), "theirs.img")
	if out, err := testenv.RunErr(60*time.Second, nbdcopy, srv.URI, theirs); err != nil {
		t.Fatalf("nbdcopy: %v\n%s", err, out)
	}
	ours := filepath.Join(t.TempDir(), "ours.img")
	runOK(t, srv.URI, ours)
	if !bytes.Equal(readFile(t, theirs), want) || !bytes.Equal(readFile(t, ours), want) {
		t.Fatal("nbdcopy's copy or ours differs from the source")
	}
}

// A copy whose source or destination fails part way (nbdkit's error
// filter on a pattern export and on a memory export, half the reads or
// writes failing) ends with an error on one line naming the errno, never
// with success.
func TestInjectedErrors(t *testing.T) {
	start := func(args ...string) string {
		_, uri := testenv.Nbdkit(t, append([]string{"--filter=error"}, args...)...)
		return uri
	}
	src, _ := testImage(t, 5)
	dst := filepath.Join(t.TempDir(), "dst.img")
	for _, tc := range []struct {
		name, from, to, want string
	}{
		{"source", start("pattern", "size=4M", "error-pread-rate=0.5"), dst, "input/output error"},
		{"destination", src, start("memory", "size=4M", "error-pwrite=ENOSPC", "error-pwrite-rate=0.5"), "no space left on device"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			err := run(context.Background(), []string{tc.from, tc.to}, &stderr)
			t.Logf("copy: %v", err)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("copy: %v, want one line saying %q", err, tc.want)
			}
		})
	}
}
