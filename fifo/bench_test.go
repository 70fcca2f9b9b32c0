package fifo

import (
	"context"
	"encoding/binary"
	"testing"
)

// benchBlocks is how many 512-byte blocks one benchmark op hands from a
// producer goroutine to a consumer goroutine.
const benchBlocks = 1 << 20

// Every variant does the same per-block work: the producer stamps the block
// with its sequence number, the consumer reads the stamp and checks it. The
// blocks themselves move by reference (the chan) or stay in place (the
// ring), so the figures compare the hand-off.

func report(b *testing.B) {
	b.SetBytes(benchBlocks * DefaultBlockSize)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchBlocks, "ns/block")
}

// BenchmarkHandoff/chan is the anchor: a buffered channel of *[512]byte with
// capacity 1024, the blocks recycled from a pool of 2048.
func BenchmarkHandoff(b *testing.B) {
	b.Run("chan", func(b *testing.B) {
		b.ReportAllocs()
		pool := make([][512]byte, 2048)
		ch := make(chan *[512]byte, 1024)
		start, stop := looper(func() {
			for i := range benchBlocks {
				p := &pool[i%len(pool)]
				binary.LittleEndian.PutUint64(p[:], uint64(i))
				ch <- p
			}
			ch <- nil
		})
		defer close(stop)
		for b.Loop() {
			start <- struct{}{}
			consumeChan(b, ch)
		}
		report(b)
	})
	b.Run("chan-batch64", func(b *testing.B) {
		b.ReportAllocs()
		const batch = 64
		pool := make([][batch][512]byte, 2048/batch)
		ch := make(chan *[batch][512]byte, 1024/batch)
		start, stop := looper(func() {
			for i := range benchBlocks / batch {
				p := &pool[i%len(pool)]
				for j := range p {
					binary.LittleEndian.PutUint64(p[j][:], uint64(i*batch+j))
				}
				ch <- p
			}
			ch <- nil
		})
		defer close(stop)
		for b.Loop() {
			start <- struct{}{}
			consumeChanBatch(b, ch)
		}
		report(b)
	})
	b.Run("ring", func(b *testing.B) { benchRing(b, 1) })
	b.Run("ring-batch64", func(b *testing.B) { benchRing(b, 64) })
}

// looper starts a long-lived goroutine that runs produce once per
// receive on start, so that no op spawns a goroutine.
func looper(produce func()) (start, stop chan struct{}) {
	start, stop = make(chan struct{}), make(chan struct{})
	go func() {
		for {
			select {
			case <-start:
				produce()
			case <-stop:
				return
			}
		}
	}()
	return start, stop
}

//go:noinline
func consumeChan(b *testing.B, ch chan *[512]byte) {
	i := uint64(0)
	for p := <-ch; p != nil; p = <-ch {
		if binary.LittleEndian.Uint64(p[:]) != i {
			b.Fatalf("block %d out of order", i)
		}
		i++
	}
}

//go:noinline
func consumeChanBatch(b *testing.B, ch chan *[64][512]byte) {
	i := uint64(0)
	for p := <-ch; p != nil; p = <-ch {
		for j := range p {
			if binary.LittleEndian.Uint64(p[j][:]) != i {
				b.Fatalf("block %d out of order", i)
			}
			i++
		}
	}
}

func benchRing(b *testing.B, batch int) {
	b.ReportAllocs()
	f, err := New(Config{Blocks: 1024})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	done := make(chan struct{})
	start, stop := looper(func() { produceRing(b, f, ctx, batch, done) })
	defer close(stop)
	for b.Loop() {
		f.Reset()
		start <- struct{}{}
		consumeRing(b, f, ctx, batch)
		<-done
	}
	st := f.Stats()
	b.ReportMetric(float64(st.FullStalls)/float64(b.N), "fullstalls/op")
	b.ReportMetric(float64(st.EmptyStalls)/float64(b.N), "emptystalls/op")
	report(b)
}

//go:noinline
func produceRing(b *testing.B, f *FIFO, ctx context.Context, batch int, done chan<- struct{}) {
	defer func() { done <- struct{}{} }()
	if batch == 1 {
		for i := range benchBlocks {
			p, err := f.Reserve(ctx)
			if err != nil {
				b.Error(err)
				return
			}
			binary.LittleEndian.PutUint64(p, uint64(i))
			f.Commit(1)
		}
		f.Close()
		return
	}
	for i := 0; i < benchBlocks; {
		p, err := f.ReserveN(ctx, batch)
		if err != nil {
			b.Error(err)
			return
		}
		k := len(p) / DefaultBlockSize
		for j := 0; j < k; j++ {
			binary.LittleEndian.PutUint64(p[j*DefaultBlockSize:], uint64(i+j))
		}
		f.Commit(k)
		i += k
	}
	f.Close()
}

//go:noinline
func consumeRing(b *testing.B, f *FIFO, ctx context.Context, batch int) {
	i := uint64(0)
	if batch == 1 {
		for {
			p, err := f.Peek(ctx)
			if err != nil {
				break
			}
			if binary.LittleEndian.Uint64(p) != i {
				b.Fatalf("block %d out of order", i)
			}
			i++
			f.Release(1)
		}
		if i != benchBlocks {
			b.Fatalf("consumer got %d blocks, want %d", i, benchBlocks)
		}
		return
	}
	for {
		p, err := f.PeekN(ctx, batch)
		if err != nil {
			break
		}
		k := len(p) / DefaultBlockSize
		for j := 0; j < k; j++ {
			if binary.LittleEndian.Uint64(p[j*DefaultBlockSize:]) != i {
				b.Fatalf("block %d out of order", i)
			}
			i++
		}
		f.Release(k)
	}
	if i != benchBlocks {
		b.Fatalf("consumer got %d blocks, want %d", i, benchBlocks)
	}
}
