package fifo_test

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/nhdkit/nhd/fifo"
)

// A producer goroutine fills blocks in place and commits them in batches; the
// consumer peeks them in place, releases them, and sees io.EOF after Close.
func Example() {
	f, err := fifo.New(fifo.Config{Blocks: 8, BlockSize: 4})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	go func() {
		for i := 0; i < 6; {
			buf, err := f.ReserveN(ctx, 4) // up to 4 blocks, contiguous
			if err != nil {
				panic(err)
			}
			k := min(len(buf)/f.BlockSize(), 6-i)
			for j := range k {
				copy(buf[j*4:], fmt.Sprintf("s%03d", i+j))
			}
			f.Commit(k)
			i += k
		}
		f.Close()
	}()
	for {
		buf, err := f.PeekN(ctx, 2)
		if errors.Is(err, io.EOF) {
			break
		}
		fmt.Printf("%q\n", buf)
		f.Release(len(buf) / f.BlockSize())
	}
	s := f.Stats()
	fmt.Println(s.Committed, "blocks,", s.ReleasedBytes, "bytes")
	// Output:
	// "s000s001"
	// "s002s003"
	// "s004s005"
	// 6 blocks, 24 bytes
}

// Watermarks report the fill level crossing the high mark, then the low
// mark, like a FIFO's interrupt line.
func ExampleConfig_watermarks() {
	marks := make(chan fifo.Mark, 4)
	f, _ := fifo.New(fifo.Config{Blocks: 8, Low: 2, High: 6, Notify: fifo.ChanNotify(marks)})
	for range 7 { // fill to 7 blocks: crosses 6
		f.TryReserve()
		f.Commit(1)
	}
	for range 5 { // drain to 2 blocks: crosses 2
		f.TryPeek()
		f.Release(1)
	}
	close(marks)
	for m := range marks {
		fmt.Println(m, "mark")
	}
	fmt.Println("level", f.Len())
	// Output:
	// high mark
	// low mark
	// level 2
}

// The Try forms never wait.
func ExampleFIFO_TryReserve() {
	f, _ := fifo.New(fifo.Config{Blocks: 1})
	_, err := f.TryPeek()
	fmt.Println(err)
	f.TryReserve()
	f.Commit(1)
	_, err = f.TryReserve()
	fmt.Println(err)
	// Output:
	// fifo: empty
	// fifo: full
}
