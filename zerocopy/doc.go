// Package zerocopy moves payloads through a data path without copying them:
// reference-counted pooled buffers (fbufs, Druschel and Peterson, SOSP 1993),
// x-kernel style messages edited without touching payload bytes, writev for
// scatter-gather sends, the kernel's splice(2) and sendfile(2) paths with a
// counted fallback, and an Accounting of copies per byte so a path can show
// what it saves. It is the software form of the NHD paper's back-end
// optimisation: the payload is handed from the network to the device by
// reference, not copied.
//
// # Buffers
//
// A Pool hands out Bufs of one fixed size, each with headroom in front of its
// payload. Get returns a writable buffer with one reference; Ref shares it
// and Release drops a reference; the last Release returns it to the pool.
// Sharing (Ref), Freeze, or appending to a Message is a hand-off: the buffer
// becomes read-only for good.
//
// Misuse is a programming error and panics with an error wrapping a
// sentinel: ErrDoubleRelease, ErrReleased, ErrReadOnly, and in a checked
// pool (Config.Checked, for tests) also ErrModifiedAfterHandoff (the payload
// changed after hand-off, found by a checksum taken at hand-off) and
// ErrWriteAfterRelease (a released buffer was written, found by poisoning).
// Without Checked, a double release is caught while the buffer sits in the
// pool but not once it has been handed out again; with Checked it is always
// caught, because handles are never reused.
//
// # Messages
//
// A Message is an ordered list of fragments viewing pooled buffers (or caller
// memory). Push prepends a header into the first buffer's headroom when the
// message holds that buffer alone, else into a new header buffer; Pop,
// TrimFront, Truncate, Split, Join, Append and Clone edit the list without
// copying payload bytes. WriteTo sends the fragments with one writev;
// ReadFrom and ReadFromN read into pooled buffers; ReadFromAt and WriteToAt
// do the same against a disk image (io.ReaderAt, io.WriterAt) at an offset.
//
// # Ownership and retention contract (for the stages that hand payloads on)
//
//  1. Whoever holds a reference releases it exactly once. Get returns one;
//     Ref adds one; Message.Append takes the caller's (the caller must not
//     use the Buf afterwards); a Message releases its references when the
//     bytes leave it (TrimFront, Pop, Truncate, Read, WriteTo, WriteToAt,
//     Release).
//  2. A handed-off buffer is immutable. Nobody writes to it again, through
//     Writable (which panics) or through a slice kept from before.
//  3. A slice obtained from a Buf or a Message is valid only while the
//     reference behind it is held: Buf.Bytes until that reference is
//     released; Message.Front, Fragment and Buffers until the message
//     changes at those bytes. To keep bytes longer, keep a reference (Clone
//     a message, Ref a buffer), never the slice.
//  4. Memory given to Message.AppendBytes is borrowed: the message never
//     writes it, and the caller must keep it unchanged until its bytes leave
//     the message.
//  5. A stage that receives a Message owns it; to pass the payload on, it
//     passes the Message (or Joins it into another) and stops using it.
//
// # Batches
//
// A Batch writes several messages to one destination together, each whole
// and in order: one writev(2) on a socket (raw on Linux, see Batch), one
// Write of a flattened copy on any other writer. Package nbd's server
// writes the replies finished at the same time that way.
//
// # Kernel paths
//
// A Sender writes to one destination connection by sendfile from regular
// files and by splice (through a private pipe) from sockets, pipes and files,
// falling back to a read/write copy where the kernel refuses, and its
// SendStats count which path ran and why. The destination must implement
// syscall.Conn: a wrapped net.Conn silently loses the zero-copy paths.
//
// # Copy accounting
//
// An Accounting collects, for one path, the payload bytes, the bytes copied
// by user-space code, and the bytes moved between kernel and user memory;
// CopiesPerByte is the figure the examples print before and after.
package zerocopy
