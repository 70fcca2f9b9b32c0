package nvme

import (
	"context"
	"io"
)

// AsyncReaderAt is the optional interface of a namespace's Backend that
// keeps reads in flight, each named by a handle (an *nbd.Client is one).
// It has the method set of package ata's and package dma's AsyncReaderAt,
// so a backend written for one is the others. Queue.Start uses it: a
// transport can then keep a queue's reads in flight from one goroutine
// that starts them and one that finishes them, instead of blocking a
// goroutine per command in Exec.
//
// The contract is ata.AsyncReaderAt's: every handle StartReadAt returns
// with a nil error is waited for exactly once; p belongs to the request
// until its Wait returns; a read succeeds only if it filled p; ctx bounds
// the call it is given. Start and Wait are called from different
// goroutines, and for different handles at once.
type AsyncReaderAt interface {
	io.ReaderAt
	StartReadAt(ctx context.Context, p []byte, off int64) (uint64, error)
	Wait(ctx context.Context, h uint64) error
}

// AsyncWriterAt is AsyncReaderAt for writes; p must not change until the
// request's Wait returns.
type AsyncWriterAt interface {
	io.WriterAt
	StartWriteAt(ctx context.Context, p []byte, off int64) (uint64, error)
	Wait(ctx context.Context, h uint64) error
}

// waiter is what a Pending needs of its backend.
type waiter interface {
	Wait(ctx context.Context, h uint64) error
}

// Pending is a Read or Write that Queue.Start started on its namespace's
// backend, until Queue.Finish. It is a small value; the zero Pending
// finishes at once with success.
type Pending struct {
	w   waiter // nil when nothing is in flight
	h   uint64
	err error // the start's failure: nothing to wait for
}

// Start starts cmd, a Read or a Write without FUA on an I/O queue, on its
// namespace's backend when that keeps requests in flight (AsyncReaderAt
// for a read, AsyncWriterAt for a write), and returns it pending: the
// caller completes it with Finish, exactly once, from any goroutine. data
// is the command's data buffer, as for Exec, and belongs to the request
// until Finish returns. ok is false, and nothing is done, for any other
// command, any other backend, and a command that Exec would fail before
// it reached the backend (out of range, a data length that does not
// match, a write to a read-only namespace): the caller then runs Exec. A
// start the backend refuses is pending all the same; Finish completes it
// with the error's status. Like Exec, Start is safe for concurrent use;
// ctx bounds the start (an NBD client waits there for a free request
// slot), not the request.
func (q *Queue) Start(ctx context.Context, cmd *Command, data []byte) (p Pending, ok bool) {
	if (cmd.Opcode != OpRead && cmd.Opcode != OpWrite) || cmd.CDW12&CDW12FUA != 0 {
		return Pending{}, false
	}
	ns := q.ioNamespace(cmd)
	if ns == nil {
		return Pending{}, false
	}
	read := cmd.Opcode == OpRead
	ar, canRead := ns.Backend.(AsyncReaderAt)
	aw, canWrite := ns.Backend.(AsyncWriterAt)
	if read && !canRead || !read && (!canWrite || ns.ReadOnly) {
		return Pending{}, false
	}
	off, length, inside := ns.span(cmd)
	if !inside || int64(len(data)) != length {
		return Pending{}, false
	}
	var w waiter
	var h uint64
	var err error
	if read {
		q.ctrl.sub.countRead(length)
		w = ar
		h, err = ar.StartReadAt(ctx, data, off)
	} else {
		q.ctrl.sub.countWrite(length)
		w = aw
		h, err = aw.StartWriteAt(ctx, data, off)
	}
	if err != nil {
		return Pending{err: err}, true
	}
	return Pending{w: w, h: h}, true
}

// Finish waits for p, the request Start returned for cmd, and returns the
// command's completion; a failure is kept in the error log, as Exec keeps
// it. If ctx ends first, the request is abandoned (the backend writes
// nothing more into a read's buffer) and the command fails.
func (q *Queue) Finish(ctx context.Context, cmd *Command, p Pending) Completion {
	err := p.err
	if p.w != nil {
		err = p.w.Wait(ctx, p.h)
	}
	cpl := Completion{CID: cmd.CID, SQID: q.id, Status: StatusOf(err)}
	if !cpl.Status.Success() && q.ctrl != nil {
		q.ctrl.logError(q.id, cmd, cpl.Status)
	}
	return cpl
}

// Async reports whether cmd, on an I/O queue, addresses a namespace whose
// backend keeps requests in flight (AsyncReaderAt or AsyncWriterAt). A
// transport that starts such a backend's reads and writes and finishes
// them on another goroutine must run the namespace's other commands
// (Flush, a FUA write, Write Zeroes, Dataset Management) where they wait
// for nothing that goroutine would do: an NBD client's requests share its
// in-flight slots, so a Flush waits for a slot that only the Waits of the
// requests started before it free.
func (q *Queue) Async(cmd *Command) bool {
	ns := q.ioNamespace(cmd)
	if ns == nil {
		return false
	}
	switch ns.Backend.(type) {
	case AsyncReaderAt, AsyncWriterAt:
		return true
	}
	return false
}
