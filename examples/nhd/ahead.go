package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/nhdkit/nhd/ata"
)

// ahead pipelines a drive's back end with its front end across commands:
// one worker goroutine makes one NBD request at a time on the drive's
// behalf, into one of two buffers, while the drive works on the other.
//
//   - Read-ahead: after serving a read of [off, off+n), the worker reads
//     [off+n, off+2n); the next command, if it is that read, finds its data
//     fetched or being fetched. Any other command discards it.
//   - Write-behind: a write's data goes from the host into a buffer and the
//     command completes; the worker writes it to the back end while the
//     host prepares the next command, which waits for it only if it needs
//     the buffer or the disk's contents. An error of a write behind is
//     returned by the next command (and by FLUSH CACHE), as a disk with a
//     write cache reports a deferred write error.
//
// The drive's goroutine owns everything but the worker's job in flight.
type ahead struct {
	be    ata.Backend
	size  int64
	bufs  [2][]byte
	cur   int // the buffer the drive uses; the worker's job is in the other
	jobs  chan job
	done  chan error
	busy  bool  // a job is in flight
	job   job   // the job in flight
	fetch bool  // the job in flight is a read-ahead of job.off
	err   error // a write behind that failed, not yet reported

	hits, misses, behind int64 // read-ahead used, reads made on demand, writes behind
}

type job struct {
	write bool
	buf   []byte
	off   int64
}

func newAhead(be ata.Backend, bs int) *ahead {
	a := &ahead{be: be, size: math.MaxInt64, jobs: make(chan job), done: make(chan error, 1)}
	if s, ok := be.(interface{ Size() int64 }); ok {
		a.size = s.Size()
	}
	for i := range a.bufs {
		a.bufs[i] = make([]byte, bs)
	}
	go a.worker()
	return a
}

func (a *ahead) worker() {
	for j := range a.jobs {
		var err error
		if j.write {
			_, err = a.be.WriteAt(j.buf, j.off)
		} else {
			var m int
			m, err = a.be.ReadAt(j.buf, j.off)
			if m == len(j.buf) {
				err = nil
			} else if err == nil {
				err = io.ErrUnexpectedEOF
			}
		}
		a.done <- err
	}
}

// wait waits for the job in flight and returns its error.
func (a *ahead) wait() error {
	if !a.busy {
		return nil
	}
	a.busy = false
	err := <-a.done
	if err != nil && a.job.write {
		a.err = fmt.Errorf("write behind at byte %d: %w", a.job.off, err)
	}
	if a.job.write || err != nil {
		a.fetch = false
	}
	return err
}

// deferred returns and clears the error of a failed write behind.
func (a *ahead) deferred() error {
	err := a.err
	a.err = nil
	return err
}

func (a *ahead) start(j job) {
	a.job, a.busy = j, true
	a.jobs <- j
}

// read returns a buffer holding [off, off+n) of the back end: the read
// ahead when it was this range, else read now through src (the device's
// view of the back end, which records the failing address). It then starts
// the read-ahead of the next n bytes into the other buffer.
func (a *ahead) read(src io.ReaderAt, off, n int64) ([]byte, error) {
	if int64(len(a.bufs[0])) < n {
		return nil, errStage
	}
	wasFetch, fetchOff := a.fetch && a.busy && !a.job.write, a.job.off
	err := a.wait()
	if derr := a.deferred(); derr != nil {
		return nil, derr
	}
	var buf []byte
	if wasFetch && err == nil && fetchOff == off && int64(len(a.job.buf)) == n {
		a.cur ^= 1 // the fetched buffer becomes the drive's
		buf = a.bufs[a.cur][:n]
		a.hits++
	} else {
		a.misses++
		buf = a.bufs[a.cur][:n]
		if m, err := src.ReadAt(buf, off); int64(m) < n {
			if err == nil || errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	a.fetch = false
	if next := off + n; next <= a.size-n {
		a.fetch = true
		a.start(job{buf: a.bufs[a.cur^1][:n], off: next})
	}
	return buf, nil
}

// writeBuffer returns the buffer the next write's data goes into, once no
// job in flight uses it: a read-ahead is dropped (the write may change what
// it read), a write behind is waited for.
func (a *ahead) writeBuffer(n int64) ([]byte, error) {
	if int64(len(a.bufs[0])) < n {
		return nil, errStage
	}
	if a.busy && a.job.write {
		// The write behind uses the other buffer; this one is free.
		return a.bufs[a.cur][:n], nil
	}
	a.wait() // a read-ahead; its result is not needed
	return a.bufs[a.cur][:n], a.deferred()
}

// writeBehind hands buf, just filled from the host, to the worker and
// makes the other buffer the drive's, after the write before it is done.
func (a *ahead) writeBehind(buf []byte, off int64) {
	a.wait()
	a.behind++
	a.start(job{write: true, buf: buf, off: off})
	a.cur ^= 1
}

// drain waits for the job in flight and returns any deferred write error.
func (a *ahead) drain() error {
	a.wait()
	return a.deferred()
}

// close drains and stops the worker.
func (a *ahead) close() error {
	err := a.drain()
	close(a.jobs)
	return err
}

// cachedBackend is the device's view of a back end behind read-ahead and
// write-behind: a flush first waits for the write behind, so FLUSH CACHE
// covers every write the device has completed.
type cachedBackend struct {
	ata.Backend
	a *ahead
}

func (c *cachedBackend) Flush(ctx context.Context) error {
	if err := c.a.drain(); err != nil {
		return err
	}
	if f, ok := c.Backend.(ata.Flusher); ok {
		return f.Flush(ctx)
	}
	return nil
}

// Size reports the back end's size (the device checks its capacity
// against it), or the largest int64 when the back end does not say.
func (c *cachedBackend) Size() int64 { return c.a.size }
