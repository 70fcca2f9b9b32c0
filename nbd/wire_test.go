package nbd

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
)

// Golden header vectors, written out from the layouts in proto.md.
func TestRequestGolden(t *testing.T) {
	r := Request{Flags: FlagFUA, Type: CmdWrite, Cookie: 0x0102030405060708, Offset: 0x1000, Length: 0x200}
	want := []byte{
		0x25, 0x60, 0x95, 0x13, // magic
		0x00, 0x01, // flags: FUA
		0x00, 0x01, // type: WRITE
		0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // cookie
		0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, // offset
		0x00, 0x00, 0x02, 0x00, // length
	}
	var b [RequestSize]byte
	r.Put(&b)
	if !bytes.Equal(b[:], want) {
		t.Fatalf("Put = % x, want % x", b, want)
	}
	var got Request
	if err := got.Parse(&b); err != nil || got != r {
		t.Fatalf("Parse = %+v, %v; want %+v", got, err, r)
	}
	b[0] = 0
	if err := got.Parse(&b); !errors.Is(err, ErrProtocol) {
		t.Fatalf("Parse of bad magic = %v, want ErrProtocol", err)
	}
}

func TestChunkHeaderGolden(t *testing.T) {
	h := ChunkHeader{Flags: ReplyFlagDone, Type: ChunkBlockStatus, Cookie: 7, Length: 12}
	want := []byte{0x66, 0x8e, 0x33, 0xef, 0, 1, 0, 5, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 12}
	var b [ChunkHeaderSize]byte
	h.Put(&b)
	if !bytes.Equal(b[:], want) {
		t.Fatalf("Put = % x, want % x", b, want)
	}
}

func TestOptionReplyGolden(t *testing.T) {
	r := OptionReply{Option: OptGo, Type: RepErrUnsup, Length: 0}
	want := []byte{0, 0x03, 0xe8, 0x89, 0x04, 0x55, 0x65, 0xa9, 0, 0, 0, 7, 0x80, 0, 0, 1, 0, 0, 0, 0}
	var b [OptionReplySize]byte
	r.Put(&b)
	if !bytes.Equal(b[:], want) {
		t.Fatalf("Put = % x, want % x", b, want)
	}
}

func TestErrnoIs(t *testing.T) {
	for _, c := range []struct {
		e    Errno
		want syscall.Errno
	}{{EIO, syscall.EIO}, {EPERM, syscall.EPERM}, {ENOSPC, syscall.ENOSPC}, {ESHUTDOWN, syscall.ESHUTDOWN}, {Errno(4242), syscall.EINVAL}} {
		var err error = c.e
		if !errors.Is(err, c.want) {
			t.Errorf("errors.Is(%v, %v) = false", c.e, c.want)
		}
	}
	if errors.Is(error(EIO), syscall.EPERM) {
		t.Error("EIO matched EPERM")
	}
}

func TestOptionErrorIs(t *testing.T) {
	var err error = &OptionError{Option: OptGo, Reply: RepErrUnknown, Message: "no such export"}
	if !errors.Is(err, ErrOptUnknownExport) || errors.Is(err, ErrOptUnsupported) {
		t.Fatalf("OptionError.Is mismatched: %v", err)
	}
}
