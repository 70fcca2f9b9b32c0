package nbd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"

	"pgregory.net/rapid"
)

// The package's Client against its Server: a rapid state machine of random
// command batches, each batch run on many goroutines at once over one (or
// several, multi-conn) client, against a byte-slice model of the disk.
// Goroutines of a batch work on disjoint stripes, so the model knows what
// every read must return even though the requests race on the wire.

const (
	serverSMStripes    = 8
	serverSMStripeSize = 3 * MemDiskChunkSize / 2 // stripes straddle chunks
	serverSMSize       = serverSMStripes * serverSMStripeSize
)

type serverSMOp struct {
	kind   string
	off    int64 // within the stripe
	n      int64
	seed   byte
	flags  CmdFlags
	stripe int
}

func TestServerClientStateMachine(t *testing.T) {
	d := NewMemDisk(serverSMSize)
	path := serverTestStart(t, &Server{MaxInFlight: 4, Exports: []Export{{Name: "sm", Backend: d}}})
	ctx := context.Background()
	uri := serverTestURI(path, "sm")
	clients := map[string]*Client{}
	for _, cfg := range []struct {
		name string
		opts []Option
	}{
		{"structured", nil},
		{"simple", []Option{WithStructuredReplies(false)}},
		{"multiconn", []Option{WithConnections(3)}},
	} {
		c, err := Dial(ctx, uri, cfg.opts...)
		if err != nil {
			t.Fatalf("Dial %s: %v", cfg.name, err)
		}
		t.Cleanup(func() { c.Close() })
		clients[cfg.name] = c
	}

	rapid.Check(t, func(rt *rapid.T) {
		// Each check starts from a known disk.
		if err := d.Trim(ctx, 0, serverSMSize); err != nil {
			rt.Fatal(err)
		}
		model := make([]byte, serverSMSize)
		opGen := rapid.Custom(func(t *rapid.T) serverSMOp {
			op := serverSMOp{
				kind: rapid.SampledFrom([]string{"write", "write", "read", "read", "trim", "zeroes", "flush", "status", "cache"}).Draw(t, "kind"),
				seed: rapid.Byte().Draw(t, "seed"),
			}
			op.off = rapid.Int64Range(0, serverSMStripeSize-1).Draw(t, "off")
			op.n = rapid.Int64Range(1, serverSMStripeSize-op.off).Draw(t, "n")
			switch op.kind {
			case "write":
				op.flags = rapid.SampledFrom([]CmdFlags{0, FlagFUA}).Draw(t, "flags")
			case "zeroes":
				op.flags = rapid.SampledFrom([]CmdFlags{0, FlagNoHole, FlagFUA, FlagFastZero}).Draw(t, "flags")
			}
			return op
		})
		rt.Repeat(map[string]func(*rapid.T){
			"batch": func(rt *rapid.T) {
				c := clients[rapid.SampledFrom([]string{"structured", "simple", "multiconn"}).Draw(rt, "client")]
				ops := rapid.SliceOfN(opGen, 1, serverSMStripes).Draw(rt, "ops")
				for i := range ops {
					ops[i].stripe = i
				}
				errs := make([]error, len(ops))
				var wg sync.WaitGroup
				for i, op := range ops {
					wg.Add(1)
					go func() {
						defer wg.Done()
						errs[i] = serverSMRun(ctx, c, op, model)
					}()
				}
				wg.Wait()
				if err := errors.Join(errs...); err != nil {
					rt.Fatal(err)
				}
			},
			"past the end": func(rt *rapid.T) {
				c := clients["structured"]
				if _, err := c.ReadAt(make([]byte, 512), serverSMSize); err == nil {
					rt.Fatal("read past the end succeeded")
				}
			},
		})
		// Whatever ran, the backend holds the model.
		got := make([]byte, serverSMSize)
		if _, err := d.ReadAt(got, 0); err != nil {
			rt.Fatal(err)
		}
		if !bytes.Equal(got, model) {
			rt.Fatal("backend differs from the model")
		}
	})
}

// serverSMRun runs op on its stripe and checks the result against model,
// which it updates; stripes are disjoint, so concurrent runs do not race.
func serverSMRun(ctx context.Context, c *Client, op serverSMOp, model []byte) error {
	off := int64(op.stripe)*serverSMStripeSize + op.off
	m := model[off : off+op.n]
	switch op.kind {
	case "write":
		p := make([]byte, op.n)
		for i := range p {
			p[i] = op.seed + byte(i*7)
		}
		var err error
		if op.flags.Has(FlagFUA) {
			_, err = c.WriteAtFUA(p, off)
		} else {
			_, err = c.WriteAt(p, off)
		}
		if err != nil {
			return fmt.Errorf("write [%d,+%d): %w", off, op.n, err)
		}
		copy(m, p)
	case "read":
		p := make([]byte, op.n)
		if _, err := c.ReadAt(p, off); err != nil {
			return fmt.Errorf("read [%d,+%d): %w", off, op.n, err)
		}
		if !bytes.Equal(p, m) {
			return fmt.Errorf("read [%d,+%d) differs from the model", off, op.n)
		}
	case "trim":
		if err := c.Trim(ctx, off, op.n); err != nil {
			return fmt.Errorf("trim: %w", err)
		}
		clear(m) // MemDisk: trimmed bytes read as zeroes
	case "zeroes":
		if err := c.WriteZeroes(ctx, off, op.n, op.flags); err != nil {
			return fmt.Errorf("zeroes %v: %w", op.flags, err)
		}
		clear(m)
	case "flush":
		if err := c.Flush(ctx); err != nil {
			return fmt.Errorf("flush: %w", err)
		}
	case "cache":
		if err := c.Cache(ctx, off, op.n); err != nil {
			return fmt.Errorf("cache: %w", err)
		}
	case "status":
		if !c.StructuredReplies() {
			return nil
		}
		ext, err := c.BlockStatus(ctx, off, op.n, nil)
		if err != nil {
			return fmt.Errorf("block status: %w", err)
		}
		pos := int64(0)
		for _, e := range ext {
			if e.Length == 0 || pos+int64(e.Length) > op.n {
				return fmt.Errorf("extent %+v at %d outside [%d,+%d)", e, pos, off, op.n)
			}
			if e.Flags.Has(ExtentZero) && !bytes.Equal(m[pos:pos+int64(e.Length)], make([]byte, e.Length)) {
				return fmt.Errorf("extent [%d,+%d) claims zeroes over data", off+pos, e.Length)
			}
			pos += int64(e.Length)
		}
		if pos == 0 {
			return errors.New("block status described nothing")
		}
	}
	return nil
}

// Server errors reach the client as Errno values that match syscall's.
func TestServerClientErrors(t *testing.T) {
	path := serverTestStart(t, &Server{Exports: []Export{{Backend: NewMemDisk(1 << 20), ReadOnly: true}}})
	c, err := Dial(context.Background(), serverTestURI(path, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.WriteAt([]byte{1}, 0); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("write to a read-only export: %v, want EPERM", err)
	}
	if c.Size() != 1<<20 || !c.Flags().Has(ExportReadOnly) {
		t.Fatalf("client sees size %d flags %v", c.Size(), c.Flags())
	}
}
