package nbd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nhdkit/nhd/internal/testenv"
)

// The server against real clients: nbdinfo, nbdcopy, qemu-img and fio
// (libnbd and qemu's NBD client).

func serverTestURI(path, name string) string {
	return "nbd+unix:///" + (&url.URL{Path: name}).EscapedPath() + "?socket=" + url.QueryEscape(path)
}

func TestServerNbdinfo(t *testing.T) {
	nbdinfo := testenv.Need(t, "nbdinfo", "libnbd-bin")
	d := NewMemDisk(4 * MemDiskChunkSize)
	d.WriteAt(bytes.Repeat([]byte{7}, 100), MemDiskChunkSize+5)
	path := serverTestStart(t, &Server{Exports: []Export{
		{Name: "", Description: "the default", Backend: d},
		{Name: "ro", Description: "read only", Backend: NewMemDisk(1 << 20), ReadOnly: true, MinBlockSize: 512},
	}})

	t.Run("json", func(t *testing.T) {
		out := testenv.Run(t, 30*time.Second, nbdinfo, "--json", serverTestURI(path, ""))
		var info struct {
			Protocol string `json:"protocol"`
			TLS      bool   `json:"TLS"`
			Exports  []map[string]any
		}
		if err := json.Unmarshal([]byte(out), &info); err != nil {
			t.Fatalf("nbdinfo --json: %v\n%s", err, out)
		}
		if info.Protocol != "newstyle-fixed" || info.TLS || len(info.Exports) != 1 {
			t.Fatalf("nbdinfo: %s", out)
		}
		e := info.Exports[0]
		want := map[string]any{
			"export-size": 4.0 * MemDiskChunkSize, "description": "the default",
			"is_read_only": false, "can_flush": true, "can_fua": true, "can_trim": true, "can_zero": true,
			"can_fast_zero": true, "can_df": true, "can_multi_conn": true, "can_cache": true, "is_rotational": false,
			"block_size_minimum": 1.0, "block_size_preferred": 4096.0, "block_size_maximum": float64(DefaultServerMaxPayload),
		}
		got := map[string]any{}
		for k := range want {
			got[k] = e[k]
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("nbdinfo facts (-want +got):\n%s\n%s", diff, out)
		}
		if ctx, _ := e["contexts"].([]any); len(ctx) != 1 || ctx[0] != MetaContextBaseAllocation {
			t.Fatalf("contexts %v, want [base:allocation]", e["contexts"])
		}
	})

	t.Run("list", func(t *testing.T) {
		out := testenv.Run(t, 30*time.Second, nbdinfo, "--list", "--json", serverTestURI(path, ""))
		var info struct{ Exports []map[string]any }
		if err := json.Unmarshal([]byte(out), &info); err != nil {
			t.Fatalf("nbdinfo --list: %v\n%s", err, out)
		}
		var got []string
		for _, e := range info.Exports {
			got = append(got, e["export-name"].(string)+"="+e["description"].(string)+"/"+
				map[bool]string{true: "ro", false: "rw"}[e["is_read_only"].(bool)])
		}
		want := []string{"=the default/rw", "ro=read only/ro"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("exports (-want +got):\n%s\n%s", diff, out)
		}
	})

	t.Run("map", func(t *testing.T) {
		out := testenv.Run(t, 30*time.Second, nbdinfo, "--map", serverTestURI(path, ""))
		var got [][]string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			got = append(got, strings.Fields(line))
		}
		want := [][]string{
			{"0", "65536", "3", "hole,zero"},
			{"65536", "65536", "0", "data"},
			{"131072", "131072", "3", "hole,zero"},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("nbdinfo --map (-want +got):\n%s", diff)
		}
	})
}

// serverTestImage writes a file of n bytes with random data and runs of
// zeroes (so copies exercise holes and zeroing) and returns its path and
// bytes.
func serverTestImage(t *testing.T, n int, seed uint64) (string, []byte) {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for off := 0; off < n; off += 256 << 10 {
		end := min(n, off+256<<10)
		if r.IntN(3) == 0 {
			continue // zeroes
		}
		for i := off; i < end; i += 8 {
			v := r.Uint64()
			for j := 0; j < 8 && i+j < end; j++ {
				b[i+j] = byte(v >> (8 * j))
			}
		}
	}
	p := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p, b
}

func serverTestDiskBytes(t *testing.T, d Backend) []byte {
	b := make([]byte, d.Size())
	if _, err := d.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestServerNbdcopy(t *testing.T) {
	nbdcopy := testenv.Need(t, "nbdcopy", "libnbd-bin")
	const size = 8 << 20
	img, want := serverTestImage(t, size, 1)
	d := NewMemDisk(size)
	d.WriteAt(bytes.Repeat([]byte{0xee}, size), 0) // the copy must overwrite or zero all of it
	path := serverTestStart(t, &Server{Exports: []Export{{Name: "x", Backend: d}}})
	uri := serverTestURI(path, "x")

	testenv.Run(t, 60*time.Second, nbdcopy, "--request-size=65536", "--connections=2", img, uri)
	if !bytes.Equal(serverTestDiskBytes(t, d), want) {
		t.Fatal("disk differs from the image after nbdcopy in")
	}
	out := filepath.Join(t.TempDir(), "out")
	testenv.Run(t, 60*time.Second, nbdcopy, "--connections=4", uri, out)
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("nbdcopy out differs from the image")
	}
}

func TestServerQemuImg(t *testing.T) {
	qemuImg := testenv.Need(t, "qemu-img", "qemu-utils")
	const size = 8 << 20
	img, want := serverTestImage(t, size, 2)
	d := NewMemDisk(size)
	path := serverTestStart(t, &Server{Exports: []Export{{Name: "q", Backend: d}}})
	uri := serverTestURI(path, "q")
	// qemu spells unix sockets its own way in a URI.
	qemuURI := "nbd+unix:///q?socket=" + path

	testenv.Run(t, 60*time.Second, qemuImg, "convert", "-n", "-f", "raw", "-O", "raw", img, qemuURI)
	if !bytes.Equal(serverTestDiskBytes(t, d), want) {
		t.Fatal("disk differs from the image after qemu-img convert in")
	}
	out := filepath.Join(t.TempDir(), "out.raw")
	testenv.Run(t, 60*time.Second, qemuImg, "convert", "-f", "raw", "-O", "raw", qemuURI, out)
	testenv.Run(t, 60*time.Second, qemuImg, "compare", "-f", "raw", "-F", "raw", img, out)
	testenv.Run(t, 60*time.Second, qemuImg, "compare", "-f", "raw", "-F", "raw", img, qemuURI)
	_ = uri
}

func TestServerFioVerify(t *testing.T) {
	fio := testenv.Need(t, "fio", "fio")
	d := NewMemDisk(32 << 20)
	path := serverTestStart(t, &Server{Exports: []Export{{Backend: d}}})
	out := testenv.Run(t, 120*time.Second, fio,
		"--name=verify", "--ioengine=nbd", "--uri="+serverTestURI(path, ""),
		"--rw=randwrite", "--bs=4k", "--size=16m", "--iodepth=16", "--numjobs=1",
		"--verify=crc32c", "--verify_fatal=1", "--do_verify=1", "--verify_state_save=0", "--randrepeat=0", "--output-format=terse")
	if strings.Contains(out, "verify:") || strings.Contains(strings.ToLower(out), "bad magic") {
		t.Fatalf("fio reported verify errors:\n%s", out)
	}
	if d.Allocated() == 0 {
		t.Fatal("fio wrote nothing to the disk")
	}
}

// nbdinfo over TLS to a server in FORCEDTLS mode, trusting its certificate
// as a CA (libnbd's x509 directory layout: ca-cert.pem).
func TestServerNbdinfoTLS(t *testing.T) {
	nbdinfo := testenv.Need(t, "nbdinfo", "libnbd-bin")
	scfg, dir := serverTestTLSDir(t)
	path := serverTestStart(t, &Server{TLSConfig: scfg, RequireTLS: true, Exports: []Export{{Name: "sec", Backend: NewMemDisk(1 << 20)}}})
	uri := "nbds+unix:///sec?socket=" + url.QueryEscape(path) + "&tls-certificates=" + url.QueryEscape(dir)
	out := testenv.Run(t, 30*time.Second, nbdinfo, "--json", uri)
	var info struct {
		TLS     bool `json:"TLS"`
		Exports []map[string]any
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("nbdinfo --json: %v\n%s", err, out)
	}
	if !info.TLS || len(info.Exports) != 1 || info.Exports[0]["export-size"] != float64(1<<20) {
		t.Fatalf("nbdinfo over TLS: %s", out)
	}
	// Without TLS the server refuses (libnbd reports the ERR_TLS_REQD).
	if out, err := testenv.RunErr(30*time.Second, nbdinfo, serverTestURI(path, "sec")); err == nil {
		t.Fatalf("nbdinfo without TLS succeeded:\n%s", out)
	}
}

// A FileDisk behind the server: nbdcopy writes an image with zero runs
// (which nbdcopy sends as WRITE_ZEROES, punched as holes), the file then
// holds the image, and nbdinfo --map sees the holes through SEEK_HOLE.
func TestServerFileDiskNbdcopy(t *testing.T) {
	nbdcopy := testenv.Need(t, "nbdcopy", "libnbd-bin")
	nbdinfo := testenv.Need(t, "nbdinfo", "libnbd-bin")
	const size = 8 << 20
	img, want := serverTestImage(t, size, 3)
	path := filepath.Join(t.TempDir(), "disk")
	if err := os.WriteFile(path, bytes.Repeat([]byte{0xee}, size), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := OpenFileDisk(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	sock := serverTestStart(t, &Server{Exports: []Export{{Backend: d}}})
	uri := serverTestURI(sock, "")
	testenv.Run(t, 60*time.Second, nbdcopy, img, uri)
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("file differs from the image after nbdcopy")
	}
	out := testenv.Run(t, 30*time.Second, nbdinfo, "--map", uri)
	holes := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[3] == "hole,zero" {
			holes++
			var off, n int
			fmt.Sscan(f[0], &off)
			fmt.Sscan(f[1], &n)
			if !bytes.Equal(want[off:off+n], make([]byte, n)) {
				t.Fatalf("hole [%d,+%d) over data", off, n)
			}
		}
	}
	if holes == 0 {
		t.Fatalf("no holes in the map of an image with zero runs:\n%s", out)
	}
}
