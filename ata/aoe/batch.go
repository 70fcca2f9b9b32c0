package aoe

// batchSize is how many frames the reading goroutine reads, and how many
// replies it sends, per call of a BatchTransport (vblade's default
// buffer count: an initiator's window rarely holds more).
const batchSize = 16

// batch is the reading goroutine's state: the requests it reads frames
// into, and the replies it has built for the ATA commands it ran itself
// and not sent yet. A BatchTransport moves a whole batch per call; any
// other Transport one frame.
type batch struct {
	reqs    []*request
	bufs    [][]byte // the reqs' buffers, for ReadFrames
	lens    []int
	replies [][]byte // reply frames, one per slot
	out     [][]byte // built replies, prefixes of replies[:len(out)]
}

func newBatch(frameSize int) batch {
	b := batch{reqs: make([]*request, batchSize), bufs: make([][]byte, batchSize),
		lens: make([]int, batchSize), replies: make([][]byte, batchSize), out: make([][]byte, 0, batchSize)}
	for i := range batchSize {
		b.reqs[i] = &request{buf: frameBuffer(frameSize)}
		b.replies[i] = frameBuffer(frameSize)[:frameSize]
	}
	return b
}

// read reads the next frames into the batch's requests and returns how
// many it read (at least one when err is nil).
func (t *Target) read() (int, error) {
	b := &t.b
	bt, ok := t.Transport.(BatchTransport)
	if !ok {
		r := b.reqs[0]
		n, err := t.Transport.ReadFrame(r.buf[:cap(r.buf)])
		if err != nil {
			return 0, err
		}
		r.buf = r.buf[:n]
		return 1, nil
	}
	for i, r := range b.reqs {
		b.bufs[i] = r.buf[:cap(r.buf)]
	}
	n, err := bt.ReadFrames(b.bufs, b.lens)
	if err != nil {
		return 0, err
	}
	for i := range n {
		b.reqs[i].buf = b.reqs[i].buf[:b.lens[i]]
	}
	return n, nil
}

// replyBuf returns the buffer for the next reply the reading goroutine
// builds, sending the built ones first if every slot is taken.
func (t *Target) replyBuf() []byte {
	if len(t.b.out) == len(t.b.replies) {
		t.flush()
	}
	return t.b.replies[len(t.b.out)]
}

// flush sends the replies the reading goroutine has built.
func (t *Target) flush() {
	out := t.b.out
	t.b.out = out[:0]
	if bt, ok := t.Transport.(BatchTransport); ok && len(out) > 1 {
		if err := bt.WriteFrames(out); err != nil {
			t.log("aoe: write", "err", err)
		}
		return
	}
	for _, f := range out {
		if err := t.Transport.WriteFrame(f); err != nil {
			t.log("aoe: write", "err", err)
		}
	}
}
