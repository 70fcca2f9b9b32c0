package tcp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nvme"
)

const testNQN = "nqn.2026-01.io.nhd:loopback"

// startServer serves disk as namespace 1 of testNQN on a loopback port.
func startServer(t testing.TB, disk nbd.Backend, bs int, opts ...func(*Server)) (*Server, string) {
	t.Helper()
	f := &nvme.Fabric{Subsystems: []*nvme.Subsystem{{NQN: testNQN, Namespaces: []nvme.Namespace{{Backend: disk, BlockSize: bs}}}}}
	s := &Server{Fabric: f}
	for _, o := range opts {
		o(s)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	t.Cleanup(func() { s.Close() })
	return s, l.Addr().String()
}

// inCapsule sets the target's in-capsule size (0: its default).
func inCapsule(n int) func(*Server) {
	return func(s *Server) { s.Fabric.InCapsuleSize = n }
}

func dialTest(t testing.TB, addr string, cfg *Config) *Host {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := Dial(ctx, addr, testNQN, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func TestLoopback(t *testing.T) {
	for _, tc := range []struct {
		name   string
		hd, dd bool
		bs     int
		inCap  int // the target's in-capsule size: writes past it take an R2T
	}{
		{"plain", false, false, 512, 0},
		{"plain, R2T", false, false, 4096, 8192},
		{"header digest", true, false, 4096, 8192},
		{"data digest", false, true, 512, 0},
		{"both digests", true, true, 4096, 0},
		{"both digests, R2T", true, true, 512, 8192},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const size = 8 << 20
			disk := nbd.NewMemDisk(size)
			_, addr := startServer(t, disk, tc.bs, inCapsule(tc.inCap))
			h := dialTest(t, addr, &Config{IOQueues: 3, QueueDepth: 16, HeaderDigest: tc.hd, DataDigest: tc.dd})
			if h.Size() != size || h.BlockSize() != tc.bs || h.IOQueues() != 3 {
				t.Fatalf("size %d block %d queues %d", h.Size(), h.BlockSize(), h.IOQueues())
			}
			model := make([]byte, size)
			rng := rand.New(rand.NewPCG(1, uint64(tc.bs)))
			// Writes of every size class: in-capsule, one R2T, several commands.
			for _, n := range []int{tc.bs, 8192, 64 << 10, 128 << 10, 1 << 20} {
				off := int64(rng.IntN((size-n)/tc.bs)) * int64(tc.bs)
				buf := make([]byte, n)
				for i := range buf {
					buf[i] = byte(rng.Uint32())
				}
				if _, err := h.WriteAt(buf, off); err != nil {
					t.Fatalf("write %d at %d: %v", n, off, err)
				}
				copy(model[off:], buf)
			}
			// Many readers at once on every queue.
			var wg sync.WaitGroup
			errs := make(chan error, 32)
			for g := range 32 {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(g), 7))
					for range 20 {
						n := (1 + r.IntN(64)) * tc.bs
						off := int64(r.IntN((size-n)/tc.bs)) * int64(tc.bs)
						buf := make([]byte, n)
						if _, err := h.ReadAt(buf, off); err != nil {
							errs <- err
							return
						}
						if !bytes.Equal(buf, model[off:off+int64(n)]) {
							errs <- errors.New("read differs from what was written")
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if err := h.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := h.WriteZeroes(context.Background(), 0, 256<<10, 0); err != nil {
				t.Fatal(err)
			}
			if err := h.Trim(context.Background(), 1<<20, 1<<20); err != nil {
				t.Fatal(err)
			}
			clear(model[:256<<10])
			clear(model[1<<20 : 2<<20])
			got := make([]byte, size)
			if _, err := h.ReadAt(got, 0); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, model) {
				t.Fatal("whole disk differs from the model")
			}
			disk2 := make([]byte, size)
			disk.ReadAt(disk2, 0)
			if !bytes.Equal(disk2, model) {
				t.Fatal("backend differs from the model")
			}
		})
	}
}

func TestLoopbackErrors(t *testing.T) {
	_, addr := startServer(t, nbd.NewMemDisk(1<<20), 512)
	h := dialTest(t, addr, &Config{IOQueues: 1})
	if _, err := h.ReadAt(make([]byte, 100), 0); !errors.Is(err, ErrUnaligned) || !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("unaligned read: %v", err)
	}
	if n, err := h.ReadAt(make([]byte, 1024), 1<<20-512); n != 512 || err != io.EOF {
		t.Fatalf("read across the end: %d %v", n, err)
	}
	if _, err := h.WriteAt(make([]byte, 1024), 1<<20-512); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write across the end: %v", err)
	}
	// Commands the host does not check locally come back as statuses.
	cmd := nvme.Command{Opcode: nvme.OpRead, NSID: 1}
	cmd.SetRange(1<<20/512, 1)
	cpl, err := h.IO(context.Background(), &cmd, make([]byte, 512))
	if err != nil || !errors.Is(cpl.Err(), nvme.StatusLBAOutOfRange) || !errors.Is(cpl.Err(), syscall.EINVAL) {
		t.Fatalf("read past the end: %v %v", cpl.Status, err)
	}
	cmd = nvme.Command{Opcode: nvme.OpRead, NSID: 9}
	if cpl, err := h.IO(context.Background(), &cmd, make([]byte, 512)); err != nil || cpl.Status.Code() != nvme.StatusInvalidNamespace {
		t.Fatalf("bad namespace: %v %v", cpl.Status, err)
	}
	if _, err := Dial(context.Background(), addr, "nqn.nothere", nil); !errors.Is(err, nvme.StatusConnectInvalidParam) {
		t.Fatalf("unknown NQN: %v", err)
	}
}

func TestDiscover(t *testing.T) {
	_, addr := startServer(t, nbd.NewMemDisk(1<<20), 512)
	es, err := Discover(context.Background(), addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(addr)
	if len(es) != 1 || es[0].SubNQN != testNQN || es[0].TrSvcID != port || es[0].TrAddr != "127.0.0.1" || es[0].TrType != nvme.TransportTCP {
		t.Fatalf("discovery entries %+v", es)
	}
}

// A listener on 0.0.0.0 is named in the discovery log by the address the
// host reached it at.
func TestDiscoverUnspecified(t *testing.T) {
	f := &nvme.Fabric{Subsystems: []*nvme.Subsystem{{NQN: testNQN, Namespaces: []nvme.Namespace{{Backend: nbd.NewMemDisk(1 << 20)}}}}}
	s := &Server{Fabric: f}
	l, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	defer s.Close()
	port := l.Addr().(*net.TCPAddr).Port
	es, err := Discover(context.Background(), net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 1 || es[0].TrAddr != "127.0.0.1" || es[0].TrSvcID != strconv.Itoa(port) {
		t.Fatalf("discovery entries %+v", es)
	}
}

func TestHostAddr(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1":                "127.0.0.1:4420",
		"127.0.0.1:4421":           "127.0.0.1:4421",
		"tcp://10.1.2.3:9000":      "10.1.2.3:9000",
		"nvme+tcp://host.example/": "host.example:4420",
		"[::1]":                    "[::1]:4420",
		"tcp://[::1]:5000":         "[::1]:5000",
	} {
		if got := hostAddr(in, DefaultPort); got != want {
			t.Errorf("hostAddr(%q) = %q, want %q", in, got, want)
		}
	}
}

// Several subsystems by NQN on one Server: each is its own namespace.
func TestSubsystems(t *testing.T) {
	a, b := nbd.NewMemDisk(1<<20), nbd.NewMemDisk(2<<20)
	f := &nvme.Fabric{Subsystems: []*nvme.Subsystem{
		{NQN: "nqn.test:a", Namespaces: []nvme.Namespace{{Backend: a}}},
		{NQN: "nqn.test:b", Namespaces: []nvme.Namespace{{Backend: b, BlockSize: 4096}}},
	}}
	s := &Server{Fabric: f}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	defer s.Close()
	ctx := context.Background()
	es, err := Discover(ctx, l.Addr().String(), nil)
	if err != nil || len(es) != 2 || es[0].SubNQN != "nqn.test:a" || es[1].SubNQN != "nqn.test:b" {
		t.Fatalf("discovery %+v %v", es, err)
	}
	for _, tc := range []struct {
		nqn  string
		disk *nbd.MemDisk
		size int64
	}{{"nqn.test:a", a, 1 << 20}, {"nqn.test:b", b, 2 << 20}} {
		h, err := Dial(ctx, l.Addr().String(), tc.nqn, &Config{IOQueues: 1})
		if err != nil {
			t.Fatal(err)
		}
		if h.Size() != tc.size {
			t.Errorf("%s: %d bytes", tc.nqn, h.Size())
		}
		if _, err := h.WriteAt(bytes.Repeat([]byte(tc.nqn[9:]), 4096), 0); err != nil {
			t.Fatal(err)
		}
		h.Close()
		got := make([]byte, 1)
		tc.disk.ReadAt(got, 0)
		if string(got) != tc.nqn[9:] {
			t.Errorf("%s wrote %q to its disk", tc.nqn, got)
		}
	}
}
