package zerocopy

import "errors"

// Misuse of a buffer is a programming error, like closing a closed channel:
// the methods that detect it panic with an error value that wraps one of the
// sentinels below, so a test can recover it and check it with errors.Is.
var (
	// ErrDoubleRelease is the panic value of Release on a buffer that holds no
	// reference any more.
	ErrDoubleRelease = errors.New("zerocopy: Release of a buffer that holds no reference (double release)")

	// ErrReleased is the panic value of any use (Ref, Bytes, Writable, Freeze)
	// of a buffer whose last reference was released.
	ErrReleased = errors.New("zerocopy: use of a released buffer")

	// ErrReadOnly is the panic value of Writable on a buffer that was handed
	// off (shared with Ref, frozen, or appended to a Message): from then on it
	// is read-only to everybody.
	ErrReadOnly = errors.New("zerocopy: write access to a buffer after hand-off (it is read-only)")

	// ErrModifiedAfterHandoff is the panic value, in a checked pool, of Ref or
	// Release when the payload bytes changed after the buffer was handed off:
	// somebody kept a slice from Writable and wrote through it.
	ErrModifiedAfterHandoff = errors.New("zerocopy: buffer written after hand-off")

	// ErrWriteAfterRelease is the panic value, in a checked pool, of Get when a
	// buffer was written to while it sat released in the pool: somebody kept a
	// slice past the last Release.
	ErrWriteAfterRelease = errors.New("zerocopy: buffer written after its last release")
)

// Errors returned by Message and Sender methods.
var (
	// ErrRange reports an offset or length outside a buffer or a message.
	ErrRange = errors.New("zerocopy: offset or length out of range")

	// ErrShort reports a Pop, Peek or TrimFront of more bytes than the message holds.
	ErrShort = errors.New("zerocopy: message shorter than requested")

	// ErrNoHeadroom reports a Push that cannot be satisfied: the header is
	// larger than the pool's headroom, or the message has no pool to take a
	// header buffer from.
	ErrNoHeadroom = errors.New("zerocopy: header larger than the headroom")

	// ErrSameMessage reports Split, Join or Clone of a message into itself.
	ErrSameMessage = errors.New("zerocopy: source and destination are the same message")

	// ErrInvalidConfig reports a pool configuration with a non-positive size
	// or a negative headroom.
	ErrInvalidConfig = errors.New("zerocopy: invalid pool configuration")
)
