package aoe

import (
	"testing"
	"unsafe"
)

func TestFrameBufferOffset(t *testing.T) {
	for _, size := range []int{MinFrameSize, 1514, 9014, 9472, 65536} {
		for range 8 {
			b := frameBuffer(size)
			if len(b) != 0 || cap(b) != size {
				t.Fatalf("frameBuffer(%d): len %d cap %d, want 0 and %d", size, len(b), cap(b), size)
			}
			b = b[:size]
			if at := uintptr(unsafe.Pointer(&b[0])) % 4096; at != framePageOffset {
				t.Fatalf("frameBuffer(%d) begins %d bytes into a page, want %d", size, at, framePageOffset)
			}
		}
	}
}
