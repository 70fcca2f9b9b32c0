package tcp

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"

	"github.com/nhdkit/nhd/internal/diskmodel"
	"github.com/nhdkit/nhd/internal/testenv"
	"github.com/nhdkit/nhd/nbd"
)

// TestNbdkitInjectedErrors serves an NBD export as the namespace (the
// NVMe-to-NBD bridge of examples/nvme-target) and reads and writes it
// through this package's host, with nbdkit's error filter failing a
// quarter of the reads (EIO), writes (ENOSPC), trims (EPERM) and zeroes
// (EINVAL) behind it. Eight goroutines on two I/O queues make one request
// at a time each on a region of their own: every failure comes back
// through the NBD client, the controller's status and the host with its
// errno, every sector read holds a write that may have reached it, and
// at the end every write that succeeded is there. With digests and
// without.
func TestNbdkitInjectedErrors(t *testing.T) {
	const size, workers = 2 << 20, 8
	for _, digests := range []bool{false, true} {
		t.Run(fmt.Sprint("digests ", digests), func(t *testing.T) {
			_, uri := testenv.Nbdkit(t, "--filter=error", "memory", fmt.Sprint("size=", size),
				"error-pread-rate=0.25", "error-pwrite=ENOSPC", "error-pwrite-rate=0.25",
				"error-trim=EPERM", "error-trim-rate=0.25", "error-zero=EINVAL", "error-zero-rate=0.25")
			client, err := nbd.Dial(context.Background(), uri)
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			_, addr := startServer(t, client, 512)
			h := dialTest(t, addr, &Config{IOQueues: 2, HeaderDigest: digests, DataDigest: digests})
			diskmodel.Workers(t, workers, func(w int) (int, error) {
				r := &nvmeFaultWorker{h: h, m: diskmodel.New(size / 512), lo: uint64(w * size / workers / 512),
					n: size / workers / 512, rng: rand.New(rand.NewPCG(uint64(w), 11))}
				err := r.run(150)
				return r.failed, err
			})
		})
	}
}

// nvmeFaultWorker makes requests on sectors [lo, lo+n) of a host's
// namespace and keeps what they may hold.
type nvmeFaultWorker struct {
	h      *Host
	m      *diskmodel.Model
	lo, n  uint64
	rng    *rand.Rand
	failed int
}

func (f *nvmeFaultWorker) run(ops int) error {
	ctx := context.Background()
	for range ops {
		k := 1 + uint64(f.rng.IntN(128))
		lba := f.lo + uint64(f.rng.IntN(int(f.n-k)+1))
		off, length := int64(lba*512), int64(k*512)
		var err error
		switch f.rng.IntN(4) {
		case 0:
			gen := f.m.Next()
			p := make([]byte, length)
			diskmodel.Fill(p, lba, gen)
			_, err = f.h.WriteAt(p, off)
			err = f.settle("write", err, syscall.ENOSPC, lba, k, gen)
		case 1:
			p := make([]byte, length)
			if _, err = f.h.ReadAt(p, off); err == nil {
				err = f.m.Check(p, lba)
			} else {
				err = f.settle("read", err, syscall.EIO, lba, k, 0)
			}
		case 2:
			err = f.settle("deallocate", f.h.Trim(ctx, off, length), syscall.EPERM, lba, k, 0)
		default:
			err = f.settle("write zeroes", f.h.WriteZeroes(ctx, off, length, 0), syscall.EINVAL, lba, k, 0)
		}
		if err != nil {
			return err
		}
	}
	return f.verify()
}

// verify reads the region back, 64 sectors at a time, each read tried
// again while the filter fails it, and checks it.
func (f *nvmeFaultWorker) verify() error {
	p := make([]byte, 64*512)
	for lba := f.lo; lba < f.lo+f.n; lba += 64 {
		q := p[:min(64, f.lo+f.n-lba)*512]
		var err error
		for try := 0; try < 50; try++ {
			if _, err = f.h.ReadAt(q, int64(lba*512)); !errors.Is(err, syscall.EIO) {
				break
			}
		}
		if err == nil {
			err = f.m.Check(q, lba)
		}
		if err != nil {
			return fmt.Errorf("the region read back at LBA %d: %w", lba, err)
		}
	}
	return nil
}

// settle records a command that changes k sectors from lba to generation
// gen (0 for a read, which changes nothing, and for zeroes): done when it
// succeeded, perhaps when it failed with errno, as it may have reached
// some of them; another error is returned.
func (f *nvmeFaultWorker) settle(op string, err error, errno syscall.Errno, lba, k, gen uint64) error {
	read := op == "read"
	switch {
	case err == nil && !read:
		f.m.Done(lba, k, gen)
	case err == nil:
	case !errors.Is(err, errno):
		return fmt.Errorf("%s of %d sectors at LBA %d: %w, want %v", op, k, lba, err, errno)
	default:
		f.failed++
		if !read {
			f.m.Maybe(lba, k, gen)
		}
	}
	return nil
}
