package bridge_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/nhdkit/nhd/ata"
	"github.com/nhdkit/nhd/bridge"
	"github.com/nhdkit/nhd/checksum"
	"github.com/nhdkit/nhd/nbd"
)

// A bridge over an NBD server in this process: the fastest datapath of
// Table 4, pipelined across commands.
func Example() {
	dir, err := os.MkdirTemp("", "bridge")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	l, err := net.Listen("unix", filepath.Join(dir, "nbd.sock"))
	if err != nil {
		log.Fatal(err)
	}
	srv := &nbd.Server{Exports: []nbd.Export{{Backend: nbd.NewMemDisk(64 << 20)}}}
	go srv.Serve(l)
	defer srv.Close()

	client, err := nbd.Dial(context.Background(), "nbd+unix:///?socket="+l.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	table := bridge.Table4()
	fastest := table[len(table)-1]
	b, err := bridge.New(bridge.Config{Backend: client, Datapath: fastest.Datapath})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	data := bytes.Repeat([]byte("NHD!"), 64<<10/4)
	back := make([]byte, len(data))
	for i := range int64(4) {
		if err := b.Write(data, i<<16); err != nil {
			log.Fatal(err)
		}
	}
	if err := b.Flush(); err != nil {
		log.Fatal(err)
	}
	for i := range int64(4) {
		if err := b.Read(back, i<<16); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println(fastest.Name)
	fmt.Println("same data:", bytes.Equal(back, data))
	fmt.Println("checksum in flight:", b.Sum() == checksum.Checksum(data, 0))
	// Output:
	// + pipelined across commands
	// same data: true
	// checksum in flight: true
}

// Table 4 over an NBD server in this process: each row's front end, back
// end and whole bridge measured, beside the cascade model's prediction
// from the two ends. The rates depend on the machine; the rows and the
// model each uses do not.
func ExampleMeasure() {
	dir, err := os.MkdirTemp("", "bridge")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	l, err := net.Listen("unix", filepath.Join(dir, "nbd.sock"))
	if err != nil {
		log.Fatal(err)
	}
	srv := &nbd.Server{Exports: []nbd.Export{{Backend: nbd.NewMemDisk(16 << 20)}}}
	go srv.Serve(l)
	defer srv.Close()
	client, err := nbd.Dial(context.Background(), "nbd+unix:///?socket="+l.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	m, err := bridge.Measure(context.Background(), bridge.MeasureConfig{
		Bridge:   bridge.Config{Backend: client},
		Span:     4 << 20,
		Duration: 50 * time.Millisecond, // per direction; -duration of examples/nhd
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range m.Rows[:len(m.Rows)/2] {
		fmt.Printf("%-28s %-6s measured: %v\n", r.Variant.Name, r.ModelKind, r.Measured > 0)
	}
	// m.WriteText(os.Stdout) prints the whole table.
	// Output:
	// store-and-forward            series measured: true
	// + DMA streaming              series measured: true
	// + zero-copy                  series measured: true
	// + checksum in flight         series measured: true
	// + pipelined in chunks        fill   measured: true
	// + pipelined across commands  series measured: true
}

// Ahead in front of any backend: read-ahead and write-behind.
func ExampleNewAhead() {
	disk := nbd.NewMemDisk(1 << 20)
	a, err := bridge.NewAhead(disk, bridge.AheadConfig{Block: 4096, Depth: 2})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := a.WriteAt([]byte("behind"), 8192); err != nil {
		log.Fatal(err)
	}
	// The read waits for the write behind.
	p := make([]byte, 6)
	if _, err := a.ReadAt(p, 8192); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n", p)
	if err := a.Close(); err != nil {
		log.Fatal(err)
	}
	// Output: behind
}

// fullDisk is a memory disk that has no room left past its first 4 KiB.
type fullDisk struct{ *nbd.MemDisk }

func (d fullDisk) WriteAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > 4096 {
		return 0, syscall.ENOSPC
	}
	return d.MemDisk.WriteAt(p, off)
}

// A write behind that fails is reported by the next call, as an
// *ata.OffsetError with the failed write's offset (the LBA an ATA device
// reports) that wraps ErrWriteBehind and the backend's error; once
// reported, it is gone.
func ExampleErrWriteBehind() {
	a, err := bridge.NewAhead(fullDisk{nbd.NewMemDisk(1 << 20)}, bridge.AheadConfig{Block: 4096, Depth: 2})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := a.WriteAt(make([]byte, 4096), 8192); err != nil {
		log.Fatal(err) // accepted: the write goes on behind
	}
	err = a.Flush(context.Background())
	var oe *ata.OffsetError
	fmt.Println(errors.Is(err, bridge.ErrWriteBehind), errors.As(err, &oe) && oe.Off == 8192, errors.Is(err, syscall.ENOSPC))
	fmt.Println(a.Flush(context.Background()))
	// Output:
	// true true true
	// <nil>
}

// The rows of Table 4, from before to after.
func ExampleTable4() {
	for _, v := range bridge.Table4() {
		fmt.Printf("%-28s streaming=%-5v zero-copy=%-5v in-flight=%-5v %v\n", v.Name, v.Streaming, v.ZeroCopy, v.ChecksumInFlight, v.Pipelining)
	}
	// Output:
	// store-and-forward            streaming=false zero-copy=false in-flight=false series
	// + DMA streaming              streaming=true  zero-copy=false in-flight=false series
	// + zero-copy                  streaming=true  zero-copy=true  in-flight=false series
	// + checksum in flight         streaming=true  zero-copy=true  in-flight=true  series
	// + pipelined in chunks        streaming=true  zero-copy=true  in-flight=true  in chunks
	// + pipelined across commands  streaming=true  zero-copy=false in-flight=true  across commands
}
