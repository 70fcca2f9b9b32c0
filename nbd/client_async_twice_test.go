package nbd

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
)

// TestCallWaitTwice waits for a Call a second time, from a copy and from
// another goroutine, after its slot has gone to another request: each
// second Wait gets ErrHandle, and the other request's result and buffer
// are untouched.
func TestCallWaitTwice(t *testing.T) {
	disk := NewMemDisk(1 << 20)
	want := bytes.Repeat([]byte{0xa5}, 4096)
	if _, err := disk.WriteAt(want, 8192); err != nil {
		t.Fatal(err)
	}
	path := serverTestStart(t, &Server{Exports: []Export{{Backend: disk}}})
	ctx := context.Background()
	// One slot: the next request reuses the slot of the first.
	c, err := Dial(ctx, serverTestURI(path, ""), WithMaxInFlight(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	first, err := c.StartRead(ctx, make([]byte, 4096), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	copied := first
	if err := first.Wait(ctx); err != nil {
		t.Fatalf("first Wait: %v", err)
	}
	if err := first.Wait(ctx); !errors.Is(err, ErrHandle) {
		t.Fatalf("second Wait: %v, want ErrHandle", err)
	}

	// The slot now serves another request: a Wait of the old call (a
	// copy of it) must not take that request's reply.
	buf := make([]byte, 4096)
	second, err := c.StartRead(ctx, buf, 8192, 0)
	if err != nil {
		t.Fatal(err)
	}
	if second.s != copied.s {
		t.Fatal("the second call did not reuse the slot: the test proves nothing")
	}
	if err := copied.Wait(ctx); !errors.Is(err, ErrHandle) {
		t.Fatalf("Wait of a spent call while its slot is in use: %v, want ErrHandle", err)
	}
	if err := second.Wait(ctx); err != nil {
		t.Fatalf("the other request: %v", err)
	}
	if !bytes.Equal(buf, want) {
		t.Fatal("the other request's data changed")
	}

	// Two copies waited for at once: exactly one gets the result.
	third, err := c.StartRead(ctx, make([]byte, 4096), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Go(func() { errs[i] = third.Wait(ctx) })
	}
	wg.Wait()
	ok, spent := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, ErrHandle):
			spent++
		default:
			t.Errorf("concurrent Wait: %v", err)
		}
	}
	if ok != 1 || spent != 1 {
		t.Fatalf("concurrent Waits: %d succeeded, %d got ErrHandle; want 1 and 1", ok, spent)
	}
}
