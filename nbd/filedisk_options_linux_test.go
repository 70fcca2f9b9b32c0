package nbd_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/nhdkit/nhd/nbd"
)

func TestCreateFileDisk(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "new.img")
	d, err := nbd.CreateFileDisk(path, 3<<20, nbd.FileDiskOptions{Perm: 0o600})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Size() != 3<<20 || fi.Mode().Perm() != 0o600 || d.Size() != 3<<20 {
		t.Fatalf("stat %v %v, Size %d: want a 3 MiB file of mode 0600", fi, err, d.Size())
	}
	if !bytes.Equal(copyTestRead(t, d), make([]byte, 3<<20)) {
		t.Error("a new disk does not read as zeroes")
	}
	if _, err := d.WriteAt([]byte("data"), 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := d.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Errorf("second Close: %v, want nil", err)
	}
	if _, err := d.ReadAt(make([]byte, 1), 0); !errors.Is(err, os.ErrClosed) {
		t.Errorf("ReadAt after Close: %v, want os.ErrClosed (the file is closed)", err)
	}
	if b, _ := os.ReadFile(path); string(b[1<<20:1<<20+4]) != "data" {
		t.Error("the write did not reach the file")
	}

	// Again over the existing file: truncated to the new size, zeroes.
	d, err = nbd.CreateFileDisk(path, 1<<20+4, nbd.FileDiskOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(copyTestRead(t, d), make([]byte, 1<<20+4)) {
		t.Error("CreateFileDisk over a file kept its bytes")
	}
	d.Close()
	if _, err := nbd.CreateFileDisk(path, 1, nbd.FileDiskOptions{Exclusive: true}); !errors.Is(err, os.ErrExist) {
		t.Errorf("Exclusive over an existing file: %v, want os.ErrExist", err)
	}
	if _, err := nbd.CreateFileDisk(path+"2", 1, nbd.FileDiskOptions{ReadOnly: true}); err == nil {
		t.Error("CreateFileDisk read-only: no error")
	}
	if _, err := nbd.CreateFileDisk(path+"3", -1, nbd.FileDiskOptions{}); err == nil {
		t.Error("CreateFileDisk of -1 bytes: no error")
	}
}

func TestOpenFileDiskReadOnly(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ro.img")
	if err := os.WriteFile(path, bytes.Repeat([]byte{7}, 8192), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := nbd.OpenFileDiskWith(path, nbd.FileDiskOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if !d.ReadOnly() {
		t.Error("ReadOnly() false")
	}
	changes := map[string]func() error{
		"WriteAt":     func() error { _, err := d.WriteAt([]byte{1}, 0); return err },
		"WriteAtFUA":  func() error { _, err := d.WriteAtFUA([]byte{1}, 0); return err },
		"Trim":        func() error { return d.Trim(ctx, 0, 4096) },
		"WriteZeroes": func() error { return d.WriteZeroes(ctx, 0, 4096, 0) },
	}
	for name, f := range changes {
		if err := f(); !errors.Is(err, syscall.EPERM) {
			t.Errorf("%s on a read-only disk: %v, want EPERM", name, err)
		}
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, bytes.Repeat([]byte{7}, 8192)) {
		t.Error("a read-only disk changed its file")
	}

	// The deprecated constructor still works, read-write.
	rw, err := nbd.OpenFileDisk(path, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rw.WriteAt([]byte{1}, 0); err != nil || rw.ReadOnly() {
		t.Errorf("OpenFileDisk(path, false): write %v, ReadOnly %v", err, rw.ReadOnly())
	}
	if err := rw.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestNewFileDiskCloseLeavesFile: a FileDisk from NewFileDisk does not own
// its file.
func TestNewFileDiskCloseLeavesFile(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d, err := nbd.NewFileDisk(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("still open")); err != nil {
		t.Errorf("the caller's file after FileDisk.Close: %v", err)
	}
}

func ExampleCreateFileDisk() {
	dir, err := os.MkdirTemp("", "nhd")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	d, err := nbd.CreateFileDisk(filepath.Join(dir, "disk.img"), 64<<20, nbd.FileDiskOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close() // the FileDisk owns the file
	srv := &nbd.Server{Exports: []nbd.Export{{Name: "disk", Backend: d}}}
	_ = srv // srv.Serve(listener)
	fmt.Println(d.Size())
	// Output: 67108864
}
