package fifo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/nhdkit/nhd/internal/allocs"
)

// stream is the byte stream both sides derive from one seed.
type stream struct{ r *rand.ChaCha8 }

func newStream(seed uint64) *stream {
	var s [32]byte
	for i := range s {
		s[i] = byte(seed >> (8 * (i % 8)))
	}
	s[31] ^= 0x5a
	return &stream{r: rand.NewChaCha8(s)}
}

func (s *stream) fill(b []byte) { s.r.Read(b) }

// TestStress runs a producer and a consumer on two goroutines with random
// batch sizes, blocking and Try calls mixed, and checks every byte the
// consumer sees against the stream the producer wrote. Run it with -race.
func TestStress(t *testing.T) {
	for _, tc := range []struct {
		name          string
		blocks, bs    int
		total         int // blocks
		maxBatch      int
		marks, closeE bool
		spin          time.Duration
	}{
		{"sectors", 64, 512, 20000, 16, false, false, 0},
		{"long ring (prefetching ahead)", 256, 512, 50000, 16, true, false, 0},
		{"tiny ring", 1, 512, 5000, 1, false, false, 0},
		{"odd sizes", 7, 13, 30000, 5, true, false, 0},
		{"close with error", 16, 64, 10000, 8, true, true, 0},
		{"park at once", 4, 512, 10000, 3, true, false, -1},
		{"long spin", 4, 512, 10000, 3, false, false, time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			marks := map[Mark]int{}
			c := Config{Blocks: tc.blocks, BlockSize: tc.bs, Spin: tc.spin}
			if tc.marks {
				c.Low, c.High = 1, tc.blocks-1
				c.Notify = func(m Mark) { mu.Lock(); marks[m]++; mu.Unlock() }
			}
			f, err := New(c)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { // producer
				defer wg.Done()
				src := newStream(42)
				rnd := rand.New(rand.NewPCG(1, 2))
				left := tc.total
				for left > 0 {
					n := 1 + rnd.IntN(min(tc.maxBatch, left))
					var b []byte
					var err error
					if rnd.IntN(4) == 0 {
						b, err = f.TryReserveN(n)
						if errors.Is(err, ErrFull) {
							continue
						}
					} else {
						b, err = f.ReserveN(ctx, n)
					}
					if err != nil {
						t.Errorf("reserve: %v", err)
						return
					}
					src.fill(b)
					k := len(b) / tc.bs
					// Commit in two parts now and then.
					if k > 1 && rnd.IntN(3) == 0 {
						if err := f.Commit(1); err != nil {
							t.Errorf("commit: %v", err)
							return
						}
						k--
					}
					if err := f.Commit(k); err != nil {
						t.Errorf("commit: %v", err)
						return
					}
					left -= len(b) / tc.bs
				}
				if tc.closeE {
					f.CloseWithError(errAbort)
				} else {
					f.Close()
				}
			}()
			want := newStream(42)
			rnd := rand.New(rand.NewPCG(3, 4))
			exp := make([]byte, tc.maxBatch*tc.bs)
			got := 0
			for {
				n := 1 + rnd.IntN(tc.maxBatch)
				var b []byte
				var err error
				if rnd.IntN(4) == 0 {
					b, err = f.TryPeekN(n)
					if errors.Is(err, ErrEmpty) {
						continue
					}
				} else {
					b, err = f.PeekN(ctx, n)
				}
				if err != nil {
					wantErr := io.EOF
					if tc.closeE {
						wantErr = errAbort
					}
					if !errors.Is(err, wantErr) {
						t.Fatalf("peek: %v, want %v", err, wantErr)
					}
					break
				}
				e := exp[:len(b)]
				want.fill(e)
				for i := range b {
					if b[i] != e[i] {
						t.Fatalf("byte %d of the stream = %#x, want %#x", got*tc.bs+i, b[i], e[i])
					}
				}
				if err := f.Release(len(b) / tc.bs); err != nil {
					t.Fatal(err)
				}
				got += len(b) / tc.bs
			}
			wg.Wait()
			if got != tc.total {
				t.Fatalf("consumer got %d blocks, want %d", got, tc.total)
			}
			s := f.Stats()
			if s.Committed != uint64(tc.total) || s.Released != uint64(tc.total) || s.ReleasedBytes != uint64(tc.total*tc.bs) {
				t.Fatalf("Stats = %+v, want %d blocks in and out", s, tc.total)
			}
			if tc.marks {
				mu.Lock()
				defer mu.Unlock()
				if uint64(marks[MarkHigh]) != s.Highs || uint64(marks[MarkLow]) != s.Lows {
					t.Fatalf("notified %v, Stats say highs %d lows %d", marks, s.Highs, s.Lows)
				}
				// The marks alternate, high first.
				if d := int(s.Highs) - int(s.Lows); d < 0 || d > 1 || s.Highs == 0 {
					t.Fatalf("highs %d, lows %d: want alternating edges", s.Highs, s.Lows)
				}
			}
		})
	}
}

// TestBlockingWakeups checks that parked calls wake on the other side's
// progress, on Close, and on their context.
func TestBlockingWakeups(t *testing.T) {
	ctx := context.Background()
	t.Run("consumer wakes on commit", func(t *testing.T) {
		f := mustNew(t, Config{Blocks: 2, BlockSize: 4})
		done := make(chan []byte)
		go func() {
			b, err := f.Peek(ctx)
			if err != nil {
				t.Error(err)
			}
			done <- b
		}()
		waitFor(t, func() bool { return f.Stats().EmptyStalls == 1 })
		time.Sleep(20 * time.Millisecond) // let it park
		b, _ := f.Reserve(ctx)
		copy(b, "abcd")
		if err := f.Commit(1); err != nil {
			t.Fatal(err)
		}
		if got := string(<-done); got != "abcd" {
			t.Fatalf("peeked %q", got)
		}
		if s := f.Stats(); s.EmptyStalls != 1 {
			t.Fatalf("EmptyStalls = %d, want 1", s.EmptyStalls)
		}
	})
	t.Run("producer wakes on release", func(t *testing.T) {
		f := mustNew(t, Config{Blocks: 1, BlockSize: 4})
		b, _ := f.Reserve(ctx)
		copy(b, "wxyz")
		f.Commit(1)
		done := make(chan error)
		go func() {
			_, err := f.Reserve(ctx)
			done <- err
		}()
		waitFor(t, func() bool { return f.Stats().FullStalls == 1 })
		time.Sleep(20 * time.Millisecond)
		if _, err := f.Peek(ctx); err != nil {
			t.Fatal(err)
		}
		f.Release(1)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if s := f.Stats(); s.FullStalls != 1 {
			t.Fatalf("FullStalls = %d, want 1", s.FullStalls)
		}
	})
	t.Run("close wakes both", func(t *testing.T) {
		full := mustNew(t, Config{Blocks: 1})
		full.Reserve(ctx)
		full.Commit(1)
		empty := mustNew(t, Config{Blocks: 1})
		errs := make(chan error, 2)
		go func() { _, err := full.Reserve(ctx); errs <- err }()
		go func() { _, err := empty.Peek(ctx); errs <- err }()
		waitFor(t, func() bool { return full.Stats().FullStalls == 1 && empty.Stats().EmptyStalls == 1 })
		time.Sleep(20 * time.Millisecond)
		full.Close()
		empty.Close()
		for range 2 {
			if err := <-errs; !errors.Is(err, ErrClosed) && !errors.Is(err, io.EOF) {
				t.Fatalf("woken with %v, want ErrClosed or io.EOF", err)
			}
		}
		// The full FIFO still drains its block, then ends.
		if b, err := full.Peek(ctx); err != nil || len(b) != 512 {
			t.Fatalf("Peek after Close = %d bytes, %v", len(b), err)
		}
		full.Release(1)
		if _, err := full.Peek(ctx); err != io.EOF {
			t.Fatalf("Peek after drain = %v, want io.EOF", err)
		}
	})
	t.Run("context", func(t *testing.T) {
		f := mustNew(t, Config{Blocks: 1})
		ctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		if _, err := f.Peek(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Peek = %v, want deadline exceeded", err)
		}
		// A later commit must not be lost to the abandoned wait.
		f.Reserve(context.Background())
		f.Commit(1)
		if _, err := f.TryPeek(); err != nil {
			t.Fatalf("TryPeek after a cancelled Peek: %v", err)
		}
	})
}

// waitFor polls cond until it holds (a goroutine has started waiting).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

func mustNew(t *testing.T, c Config) *FIFO {
	t.Helper()
	f, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestConfig(t *testing.T) {
	nop := func(Mark) {}
	for _, tc := range []struct {
		name string
		c    Config
		ok   bool
	}{
		{"defaults", Config{}, true},
		{"one byte blocks", Config{Blocks: 3, BlockSize: 1}, true},
		{"negative blocks", Config{Blocks: -1}, false},
		{"negative size", Config{BlockSize: -2}, false},
		{"huge", Config{Blocks: 1 << 30, BlockSize: 1 << 20}, false},
		{"marks", Config{Blocks: 8, Low: 2, High: 6, Notify: nop}, true},
		{"marks low = high", Config{Blocks: 8, Low: 4, High: 4, Notify: nop}, false},
		{"marks high > blocks", Config{Blocks: 8, Low: 0, High: 9, Notify: nop}, false},
		{"marks negative low", Config{Blocks: 8, Low: -1, High: 2, Notify: nop}, false},
		{"marks ignored without Notify", Config{Blocks: 8, Low: 4, High: 4}, true},
	} {
		f, err := New(tc.c)
		if tc.ok != (err == nil) {
			t.Errorf("%s: New(%+v) error %v, want ok=%v", tc.name, tc.c, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrConfig) {
			t.Errorf("%s: error %v does not wrap ErrConfig", tc.name, err)
		}
		if err == nil && tc.name == "defaults" && (f.Cap() != DefaultBlocks || f.BlockSize() != DefaultBlockSize) {
			t.Errorf("defaults: Cap %d BlockSize %d", f.Cap(), f.BlockSize())
		}
	}
}

func TestChanNotify(t *testing.T) {
	ch := make(chan Mark, 1)
	f := mustNew(t, Config{Blocks: 4, Low: 0, High: 2, Notify: ChanNotify(ch)})
	ctx := context.Background()
	f.ReserveN(ctx, 3)
	f.Commit(3) // 0 -> 3 crosses High
	f.PeekN(ctx, 3)
	f.Release(3) // 3 -> 0 crosses Low, but ch is full: dropped
	if m := <-ch; m != MarkHigh || m.String() != "high" {
		t.Fatalf("first mark %v", m)
	}
	select {
	case m := <-ch:
		t.Fatalf("unexpected mark %v", m)
	default:
	}
	if s := f.Stats(); s.Highs != 1 || s.Lows != 1 {
		t.Fatalf("Stats %+v, want one of each", s)
	}
	if MarkLow.String() != "low" || Mark(9).String() != "Mark(9)" {
		t.Fatal("Mark.String")
	}
}

// TestNoAllocs pins the steady state at zero allocations per block.
func TestNoAllocs(t *testing.T) {
	f := mustNew(t, Config{Blocks: 8})
	ctx := context.Background()
	nallocs := allocs.PerRun(1000, func() {
		b, _ := f.ReserveN(ctx, 3)
		f.Commit(len(b) / 512)
		p, _ := f.PeekN(ctx, 3)
		f.Release(len(p) / 512)
		f.TryReserve()
		f.Commit(1)
		f.TryPeek()
		f.Release(1)
	})
	if nallocs > allocs.Slack {
		t.Fatalf("%v allocations per run, want 0", nallocs)
	}
}

// TestPingPongParked hands blocks through a one-block ring whose sides park
// right after their few re-checks (Config.Spin < 0), so that hand-offs
// often end in a park and a wake-up, the park often just as the other side
// publishes: a lost wake-up stops both, which the context's deadline
// reports. On linux/amd64 without -race this runs
// the release stores and the fence after a long park (internal/spin's
// Publish); with -race, sync/atomic's stores.
func TestPingPongParked(t *testing.T) {
	rounds := 50000
	if testing.Short() {
		rounds = 5000
	}
	f, err := New(Config{Blocks: 1, BlockSize: 8, Spin: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		for i := range rounds {
			b, err := f.Reserve(ctx)
			if err != nil {
				errc <- fmt.Errorf("reserve %d: %w", i, err)
				return
			}
			b[0] = byte(i)
			if err := f.Commit(1); err != nil {
				errc <- err
				return
			}
		}
		f.Close()
		errc <- nil
	}()
	for i := range rounds {
		b, err := f.Peek(ctx)
		if err != nil {
			t.Fatalf("peek %d: %v (%+v)", i, err, f.Stats())
		}
		if b[0] != byte(i) {
			t.Fatalf("block %d holds %d", i, b[0])
		}
		if err := f.Release(1); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-errc; err != nil {
		t.Fatalf("producer: %v (%+v)", err, f.Stats())
	}
	if _, err := f.Peek(ctx); err != io.EOF {
		t.Fatalf("after the last block: %v, want io.EOF", err)
	}
}

// The producer takes a slot's first line prefetchAhead bytes ahead, in
// whole blocks and at least one, only in a ring longer than twice that;
// and it streams correctly whatever the distance (TestStress runs rings on
// both sides of the rule).
func TestPrefetchAhead(t *testing.T) {
	for _, tc := range []struct{ blocks, bs, want int }{
		{1024, 512, prefetchAhead / 512},
		{2 * prefetchAhead / 512, 512, 0}, // exactly twice: too short
		{2*prefetchAhead/512 + 1, 512, prefetchAhead / 512},
		{16, 64 << 10, 1},
		{2, 64 << 10, 0},
		{1, 512, 0},
		{1 << 20, 8, prefetchAhead / 8},
	} {
		f, err := New(Config{Blocks: tc.blocks, BlockSize: tc.bs})
		if err != nil {
			t.Fatal(err)
		}
		if f.p.ahead != tc.want {
			t.Errorf("Blocks %d, BlockSize %d: ahead %d, want %d", tc.blocks, tc.bs, f.p.ahead, tc.want)
		}
	}
}
