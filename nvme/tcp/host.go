package tcp

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nhdkit/nhd/nbd"
	"github.com/nhdkit/nhd/nvme"
)

var timeZero time.Time

// DefaultQueueFill is Config.QueueFill's default: up to 16 commands
// share an I/O queue before the next one takes any (examples/nvmebench
// compares it with the spread, -fill 1).
const DefaultQueueFill = 16

// DefaultPort is the NVMe/TCP port for I/O controllers; discovery
// controllers default to 8009.
const DefaultPort = "4420"

// Config tunes a Host. The zero value works.
type Config struct {
	// HostNQN names the host; empty means a UUID-based NQN made from
	// HostID.
	HostNQN string
	// HostID identifies the host; zero means random.
	HostID [16]byte
	// IOQueues is how many I/O queues to ask for (one connection each);
	// 0 means GOMAXPROCS. The controller may grant fewer.
	IOQueues int
	// QueueDepth is how many commands each I/O queue carries at once; 0
	// means 128. It is capped by the controller's CAP.MQES (a queue with
	// SQ flow control on needs an entry more than its commands) and
	// MAXCMD, and at least 2.
	QueueDepth int
	// QueueFill is how many commands an I/O queue carries before the
	// host sends to another: a command goes to the first queue (in queue
	// order) with fewer than QueueFill in flight, and once every queue
	// has that many, to the queue with the most free slots. Few commands
	// thus share one connection's writes and reads instead of each
	// connection carrying a few, and many spread over all of them. 0
	// means DefaultQueueFill; 1 spreads every command to the freest queue.
	QueueFill int
	// HeaderDigest and DataDigest ask for CRC32C digests on every PDU.
	HeaderDigest, DataDigest bool
	// KeepAlive is the keep alive timeout (KATO) asked for; a Keep Alive
	// goes every half of it. 0 means 5 s; negative means none.
	KeepAlive time.Duration
	// NSID is the namespace to use; 0 means the first active one.
	NSID uint32
	// NamespaceChanged, if set, is called with the namespace's new size
	// in bytes (0: the namespace is no longer active) after the
	// controller reported that it changed (a Namespace Attribute Changed
	// event; Size returns the new size from then on), and after a
	// reconnection found it grown. It is called from the host's own
	// goroutine, one call at a time, and must not block for long.
	NamespaceChanged func(size int64)
	// ReconnectDelay is the wait before each attempt to reconnect after
	// a connection drops; 0 means DefaultReconnectDelay.
	ReconnectDelay time.Duration
	// LossTimeout is how long after a connection drops the host keeps
	// trying to reconnect, its I/O commands waiting, before they fail
	// with ErrControllerLost; 0 means DefaultLossTimeout, negative means
	// no reconnection: a dropped connection fails its commands at once.
	LossTimeout time.Duration
	// SplicedWrites sends a batch of PDUs carrying at least
	// zerocopy.SpliceMin bytes (large writes' data) by vmsplice and splice
	// instead of writev, on Linux over a socket (zerocopy.Batch.SetSplice):
	// the socket then points at the caller's pages instead of a copy,
	// until the controller has read them. A command's completion comes
	// after its data was read, so WriteAt keeps its contract; a command
	// that fails with its connection (ErrControllerLost) leaves its
	// buffer to the controller until the connection is closed at both
	// ends. For controllers trusted with that, as nbd.WithSplicedWrites.
	SplicedWrites bool
}

// Host is an NVMe/TCP host connected to one controller of one subsystem:
// an admin queue and I/O queues, each on its own TCP connection, with
// many commands in flight on each. It reads and writes one namespace as
// an io.ReaderAt and io.WriterAt and implements nbd.Backend with its
// optional Flusher, FUAWriter, Trimmer and Zeroer, so it can be served by
// nbd.Server or sit behind an ata.Device. All methods are safe for
// concurrent use; ReadAt and WriteAt do not retain their buffers after
// they return.
type Host struct {
	cfg         Config
	addr        string
	subNQN      string
	admin       atomic.Pointer[hostQueue]
	io          []*hostQueue
	next        atomic.Uint32
	cntlid      uint16
	id          nvme.IdentifyController
	ns          nvme.IdentifyNamespace
	nsid        uint32
	shift       uint
	size        atomic.Int64 // changes with the namespace (host_events.go)
	maxTransfer int
	cc          nvme.CC
	kaStop      chan struct{}
	kaDone      chan struct{}
	watch       sync.WaitGroup // the namespace watch (host_events.go)
	notices     bool           // the controller reports namespace changes
	resizeMu    sync.Mutex     // serializes Config.NamespaceChanged
	closeOnce   sync.Once

	recMu      sync.Mutex
	recovering bool          // recover runs
	again      bool          // a connection dropped while it ran
	closed     bool          // Close began
	lost       error         // recovery gave up
	recDone    chan struct{} // closed when recover returns
	stopRec    chan struct{} // closed by Close
}

// hostAddr turns "host", "host:port", "tcp://host:port" or
// "nvme+tcp://host:port" into host:port.
func hostAddr(addr, port string) string {
	for _, p := range []string{"nvme+tcp://", "tcp://"} {
		addr = strings.TrimPrefix(addr, p)
	}
	addr = strings.TrimSuffix(addr, "/")
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return net.JoinHostPort(strings.Trim(addr, "[]"), port)
	}
	return addr
}

func (cfg *Config) defaults() {
	if cfg.HostID == [16]byte{} {
		rand.Read(cfg.HostID[:])
		cfg.HostID[6] = cfg.HostID[6]&0x0F | 0x40
		cfg.HostID[8] = cfg.HostID[8]&0x3F | 0x80
	}
	if cfg.HostNQN == "" {
		u := cfg.HostID
		cfg.HostNQN = fmt.Sprintf("nqn.2014-08.org.nvmexpress:uuid:%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
	}
	if cfg.IOQueues <= 0 {
		cfg.IOQueues = runtime.GOMAXPROCS(0)
	}
	if cfg.QueueFill <= 0 {
		cfg.QueueFill = DefaultQueueFill
	}
	if cfg.QueueDepth <= 0 {
		cfg.QueueDepth = 128
	}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = 5 * time.Second
	}
	if cfg.ReconnectDelay <= 0 {
		cfg.ReconnectDelay = DefaultReconnectDelay
	}
	if cfg.LossTimeout == 0 {
		cfg.LossTimeout = DefaultLossTimeout
	}
}

// connectAdmin connects and enables an admin queue (nvme-tcp-facts §9).
func connectAdmin(ctx context.Context, addr, subnqn string, cfg *Config) (*hostQueue, uint16, nvme.CC, error) {
	kato := uint32(0)
	if cfg.KeepAlive > 0 {
		kato = uint32(cfg.KeepAlive / time.Millisecond)
	}
	d := nvme.ConnectData{HostID: cfg.HostID, ControllerID: nvme.DynamicControllerID, SubNQN: subnqn, HostNQN: cfg.HostNQN}
	q, res, err := dialQueue(ctx, addr, cfg, nvme.Connect{SQSize: 31, KATO: kato}, &d)
	if err != nil {
		return nil, 0, 0, err
	}
	capv, err := q.property(ctx, false, nvme.PropCAP, 0)
	if err == nil && nvme.CAP(capv).MPSMin() != 0 {
		err = errors.New("nvme/tcp: controller's smallest page is not 4 KiB")
	}
	cc := nvme.CCEnable
	if err == nil {
		_, err = q.property(ctx, true, nvme.PropCC, uint64(cc))
	}
	if err == nil {
		err = q.waitCSTS(ctx, nvme.CSTSReady, nvme.CSTSReady, time.Duration(nvme.CAP(capv).Timeout()+1)*500*time.Millisecond)
	}
	if err != nil {
		q.close()
		return nil, 0, 0, err
	}
	return q, uint16(res), cc, nil
}

func (q *hostQueue) property(ctx context.Context, set bool, off uint32, v uint64) (uint64, error) {
	var cmd nvme.Command
	nvme.Property{Set: set, Size8: off == nvme.PropCAP, Offset: off, Value: v}.Encode(&cmd)
	cpl, err := q.do(ctx, &cmd, nil, nil)
	if err == nil {
		err = cpl.Err()
	}
	return cpl.Result, err
}

// waitCSTS polls CSTS until (CSTS & mask) == want; CFS fails at once.
func (q *hostQueue) waitCSTS(ctx context.Context, mask, want nvme.CSTS, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		v, err := q.property(ctx, false, nvme.PropCSTS, 0)
		if err != nil {
			return err
		}
		switch s := nvme.CSTS(v); {
		case s&mask == want:
			return nil
		case s&nvme.CSTSFatal != 0:
			return errors.New("nvme/tcp: controller fatal status (CSTS.CFS)")
		case time.Now().After(deadline):
			return fmt.Errorf("nvme/tcp: controller status %#x not %#x in time", uint32(s), uint32(want))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Dial connects to subsystem subnqn at addr ("host", "host:port",
// "tcp://host:port"; the port defaults to 4420) in the order the Linux
// host does: admin queue, Connect, CC.EN, Identify, Number of Queues, I/O
// queues, namespace. cfg may be nil.
func Dial(ctx context.Context, addr, subnqn string, cfg *Config) (*Host, error) {
	h := &Host{subNQN: subnqn, stopRec: make(chan struct{})}
	if cfg != nil {
		h.cfg = *cfg
	}
	h.cfg.defaults()
	h.addr = hostAddr(addr, DefaultPort)
	admin, cntlid, cc, err := connectAdmin(ctx, h.addr, subnqn, &h.cfg)
	if err != nil {
		return nil, err
	}
	h.admin.Store(admin)
	h.cntlid, h.cc = cntlid, cc
	if err := h.setup(ctx, h.addr); err != nil {
		h.Close()
		return nil, err
	}
	h.watchNamespace(admin)
	if h.cfg.LossTimeout > 0 {
		admin.recoverBy(h.connectionLost, false)
		for _, q := range h.io {
			q.recoverBy(h.connectionLost, true)
		}
	}
	return h, nil
}

func (h *Host) setup(ctx context.Context, addr string) error {
	page := make([]byte, nvme.IdentifySize)
	if err := h.identify(ctx, nvme.CNSController, 0, page); err != nil {
		return err
	}
	h.id.Parse((*[nvme.IdentifySize]byte)(page))
	if h.id.ControllerID != h.cntlid {
		return fmt.Errorf("nvme/tcp: controller id %d differs from Connect's %d", h.id.ControllerID, h.cntlid)
	}
	h.enableNotices(ctx, h.admin.Load(), &h.id)
	h.maxTransfer = 1 << 20
	if h.id.MDTS != 0 && h.id.MDTS < 8 {
		h.maxTransfer = 4096 << h.id.MDTS
	}
	cmd := nvme.Command{Opcode: nvme.OpSetFeatures, CDW10: nvme.FeatNumberOfQueues, CDW11: nvme.NumberOfQueues(uint16(h.cfg.IOQueues), uint16(h.cfg.IOQueues))}
	cpl, err := h.admin.Load().do(ctx, &cmd, nil, nil)
	if err == nil {
		err = cpl.Err()
	}
	if err != nil {
		return fmt.Errorf("nvme/tcp: set number of queues: %w", err)
	}
	sq, cq := nvme.QueuesOf(uint32(cpl.Result))
	n := min(h.cfg.IOQueues, sq, cq)
	if err := h.findNamespace(ctx, page); err != nil {
		return err
	}
	return h.connectIO(ctx, addr, n)
}

func (h *Host) connectIO(ctx context.Context, addr string, n int) error {
	capv, err := h.admin.Load().property(ctx, false, nvme.PropCAP, 0)
	if err != nil {
		return err
	}
	// At most MQES in flight, so that the queue fits with SQ flow control
	// on (one entry more than commands), should a controller keep it on
	// at a reconnection.
	depth := min(h.cfg.QueueDepth, int(nvme.CAP(capv).MQES()))
	if h.id.MaxCmd > 0 {
		depth = min(depth, int(h.id.MaxCmd))
	}
	depth = max(depth, 2) // SQSIZE is 0's based and must not be 0
	inCap := max(int(h.id.IOCCSZ)*16-64, 0)
	d := nvme.ConnectData{HostID: h.cfg.HostID, ControllerID: h.cntlid, SubNQN: h.subNQN, HostNQN: h.cfg.HostNQN}
	for qid := 1; qid <= n; qid++ {
		q, _, err := dialIOQueue(ctx, addr, &h.cfg, depth, nvme.Connect{QID: uint16(qid)}, &d)
		if err != nil {
			return err
		}
		q.inCap = inCap
		h.io = append(h.io, q)
		h.maxTransfer = min(h.maxTransfer, maxR2TChunks*q.maxH2C)
	}
	if h.cfg.KeepAlive > 0 {
		h.kaStop, h.kaDone = make(chan struct{}), make(chan struct{})
		go h.keepAlive(h.cfg.KeepAlive / 2)
	}
	return nil
}

func (h *Host) identify(ctx context.Context, cns uint8, nsid uint32, page []byte) error {
	return h.admin.Load().identify(ctx, cns, nsid, page)
}

func (q *hostQueue) identify(ctx context.Context, cns uint8, nsid uint32, page []byte) error {
	cmd := nvme.Command{Opcode: nvme.OpIdentify, NSID: nsid, CDW10: uint32(cns)}
	cpl, err := q.do(ctx, &cmd, page, nil)
	if err == nil {
		err = cpl.Err()
	}
	if err != nil {
		return fmt.Errorf("nvme/tcp: identify CNS %d: %w", cns, err)
	}
	return nil
}

func (h *Host) findNamespace(ctx context.Context, page []byte) error {
	h.nsid = h.cfg.NSID
	if h.nsid == 0 {
		if err := h.identify(ctx, nvme.CNSActiveNamespaces, 0, page); err != nil {
			return err
		}
		ids := nvme.ParseNamespaceList((*[nvme.IdentifySize]byte)(page), nil)
		if len(ids) == 0 {
			return errors.New("nvme/tcp: subsystem has no active namespace")
		}
		h.nsid = ids[0]
	}
	if err := h.identify(ctx, nvme.CNSNamespace, h.nsid, page); err != nil {
		return err
	}
	h.ns.Parse((*[nvme.IdentifySize]byte)(page))
	bs := h.ns.BlockSize()
	if bs == 0 || h.ns.LBAF[h.ns.FLBAS&0xF].MetadataSize != 0 {
		return fmt.Errorf("nvme/tcp: namespace %d has an unusable format", h.nsid)
	}
	for ; 1<<h.shift < bs; h.shift++ {
	}
	h.size.Store(int64(h.ns.Size) << h.shift)
	h.maxTransfer = min(h.maxTransfer, 65536<<h.shift)
	return nil
}

func (h *Host) keepAlive(every time.Duration) {
	defer close(h.kaDone)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-h.kaStop:
			return
		case <-t.C: // a failure is the admin queue's loss, which recovery handles
			cmd := nvme.Command{Opcode: nvme.OpKeepAlive}
			h.admin.Load().do(context.Background(), &cmd, nil, nil)
		}
	}
}

// Close shuts the controller down (I/O queues first, then CC.SHN on the
// admin queue, waiting for CSTS.SHST) and closes every connection. It
// stops a reconnection under way; the commands waiting for it fail with
// ErrClosed.
func (h *Host) Close() error {
	h.closeOnce.Do(func() {
		h.recMu.Lock()
		h.closed = true
		done := h.recDone
		h.recMu.Unlock()
		close(h.stopRec)
		if done != nil {
			<-done
		}
		if h.kaStop != nil {
			close(h.kaStop)
			<-h.kaDone
		}
		for _, q := range h.io {
			q.close()
		}
		admin := h.admin.Load()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := admin.property(ctx, true, nvme.PropCC, uint64(h.cc|nvme.CCShutdown)); err == nil {
			admin.waitCSTS(ctx, nvme.CSTSShutdownMask, nvme.CSTSShutdownComplete, 5*time.Second)
		}
		admin.close()
		h.watch.Wait()
	})
	return nil
}

// Size returns the namespace's size in bytes, as the controller last
// reported it (see Config.NamespaceChanged).
func (h *Host) Size() int64 { return h.size.Load() }

// BlockSize returns the namespace's block size.
func (h *Host) BlockSize() int { return 1 << h.shift }

// IOQueues returns how many I/O queues are connected.
func (h *Host) IOQueues() int { return len(h.io) }

// Controller returns the controller's Identify data.
func (h *Host) Controller() nvme.IdentifyController { return h.id }

// Namespace returns the namespace's id and Identify data.
func (h *Host) Namespace() (uint32, nvme.IdentifyNamespace) { return h.nsid, h.ns }

// Admin runs an admin command; data is filled by a command that returns
// data and sent by one that sends it (by its opcode's direction). While
// the controller reports namespace changes, the host keeps an
// Asynchronous Event Request of its own with it (see
// Config.NamespaceChanged): one sent through Admin gets an event only
// when the controller gives it one, in the order it took the requests.
func (h *Host) Admin(ctx context.Context, cmd *nvme.Command, data []byte) (nvme.Completion, error) {
	return h.admin.Load().run(ctx, cmd, data)
}

// IO runs an I/O command on one of the I/O queues, data as for Admin.
func (h *Host) IO(ctx context.Context, cmd *nvme.Command, data []byte) (nvme.Completion, error) {
	return h.queue().run(ctx, cmd, data)
}

func (q *hostQueue) run(ctx context.Context, cmd *nvme.Command, data []byte) (nvme.Completion, error) {
	var rbuf, wbuf []byte
	switch cmd.Direction() {
	case nvme.DirCtrlToHost:
		rbuf = data
	case nvme.DirHostToCtrl:
		wbuf = data
	}
	return q.do(ctx, cmd, rbuf, wbuf)
}

// queue picks the I/O queue for a command (Config.QueueFill): the first
// with fewer than QueueFill commands in flight, else the one with the most
// free slots, ties broken by a turning counter. A depth that one queue
// carries well thus keeps to one connection, whose writevs, target reads
// and wake-ups each carry more; past it, the callers that a burst of
// completions on one queue woke start their next commands on that queue,
// where they share one writev and the target answers them together,
// rather than split over every queue in turn (examples/nvmebench).
func (h *Host) queue() *hostQueue {
	if len(h.io) == 1 {
		return h.io[0]
	}
	if fill := h.cfg.QueueFill; fill > 1 {
		for _, q := range h.io {
			if len(q.slots)-len(q.free) < fill {
				return q
			}
		}
	}
	start := int(h.next.Add(1))
	best, most := h.io[start%len(h.io)], -1
	for k := range h.io {
		q := h.io[(start+k)%len(h.io)]
		if n := len(q.free); n > most {
			best, most = q, n
		}
	}
	return best
}

// check validates an I/O of n bytes at off: aligned, inside the
// namespace (n is cut at its end, with io.EOF for a read).
func (h *Host) check(n int, off int64, read bool) (int, error) {
	mask := int64(1)<<h.shift - 1
	if off < 0 || off&mask != 0 || int64(n)&mask != 0 {
		return 0, fmt.Errorf("%w: %d bytes at %d, block size %d: %w", ErrUnaligned, n, off, 1<<h.shift, syscall.EINVAL)
	}
	size := h.size.Load()
	if int64(n) > size-off {
		if !read || off > size {
			return 0, fmt.Errorf("nvme/tcp: %d bytes at %d past the namespace's %d: %w", n, off, size, syscall.ENOSPC)
		}
		return int(size - off), io.EOF
	}
	return n, nil
}

// ReadAt reads len(p) bytes at off, a multiple of the block size, in
// commands of at most the controller's largest transfer on one I/O
// queue, as many in flight at once as it has free slots (up to 64).
func (h *Host) ReadAt(p []byte, off int64) (int, error) {
	n, eof := h.check(len(p), off, true)
	if n == 0 && eof != nil {
		return 0, eof
	}
	if err := h.rw(nvme.OpRead, p[:n], off, 0); err != nil {
		return 0, err
	}
	return n, eof
}

// WriteAt writes p at off, a multiple of the block size.
func (h *Host) WriteAt(p []byte, off int64) (int, error) {
	return h.write(p, off, 0)
}

// WriteAtFUA writes p at off with Force Unit Access.
func (h *Host) WriteAtFUA(p []byte, off int64) (int, error) {
	return h.write(p, off, nvme.CDW12FUA)
}

func (h *Host) write(p []byte, off int64, cdw12 uint32) (int, error) {
	if _, err := h.check(len(p), off, false); err != nil {
		return 0, err
	}
	if err := h.rw(nvme.OpWrite, p, off, cdw12); err != nil {
		return 0, err
	}
	return len(p), nil
}

// rw runs Read or Write commands over p, up to 64 (and at most the
// queue's depth) in flight at a time. Only the batch's first command
// waits for a free slot; the others take one if it is free, and the
// batch ends where none is: a call never holds slots while it waits for
// more, which concurrent calls could each be doing with every slot held
// (and no one left to wait for a completion, which frees them).
func (h *Host) rw(op nvme.Opcode, p []byte, off int64, cdw12 uint32) error {
	q := h.queue()
	var started [64]uint16
	for len(p) > 0 {
		k, n, err := h.startBatch(q, op, p, off, cdw12, &started)
		p, off = p[n:], off+int64(n)
		for _, i := range started[:k] {
			cpl, werr := q.wait(i)
			if werr == nil {
				werr = cpl.Err()
			}
			if err == nil {
				err = werr
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// startBatch starts the commands of one of rw's batches over p, their
// slots in started: k commands covering p's first n bytes. The first
// waits for a slot; the batch ends at the first that finds none free.
func (h *Host) startBatch(q *hostQueue, op nvme.Opcode, p []byte, off int64, cdw12 uint32, started *[64]uint16) (k, n int, err error) {
	for ; k < min(len(started), len(q.slots)) && n < len(p); k++ {
		m := min(len(p)-n, h.maxTransfer)
		cmd := nvme.Command{Opcode: op, NSID: h.nsid, CDW12: cdw12}
		cmd.SetRange(uint64((off+int64(n))>>h.shift), uint32(m>>h.shift))
		rbuf, wbuf := p[n:n+m], []byte(nil)
		if op != nvme.OpRead {
			rbuf, wbuf = nil, rbuf
		}
		if k == 0 {
			started[k], err = q.start(context.Background(), &cmd, rbuf, wbuf)
		} else {
			var ok bool
			if started[k], ok, err = q.tryStart(&cmd, rbuf, wbuf); !ok && err == nil {
				return k, n, nil
			}
		}
		if err != nil {
			return k, n, err
		}
		n += m
	}
	return k, n, nil
}

// Flush makes completed writes durable (a Flush command to the
// namespace).
func (h *Host) Flush(ctx context.Context) error {
	cmd := nvme.Command{Opcode: nvme.OpFlush, NSID: h.nsid}
	cpl, err := h.IO(ctx, &cmd, nil)
	if err == nil {
		err = cpl.Err()
	}
	return err
}

// Trim deallocates [off, off+length) with Dataset Management, in ranges
// of at most 2^32-1 blocks, 256 ranges per command.
func (h *Host) Trim(ctx context.Context, off, length int64) error {
	if _, err := h.check(int(min(length, 1<<40)), off, false); err != nil || length <= 0 {
		return err
	}
	data := make([]byte, 256*nvme.DSMRangeSize)
	for length > 0 {
		nr := 0
		for ; nr < 256 && length > 0; nr++ {
			n := min(length>>h.shift, 1<<32-1)
			r := nvme.DSMRange{Blocks: uint32(n), LBA: uint64(off >> h.shift)}
			r.Put((*[nvme.DSMRangeSize]byte)(data[nr*nvme.DSMRangeSize:]))
			off, length = off+n<<h.shift, length-n<<h.shift
		}
		cmd := nvme.Command{Opcode: nvme.OpDatasetManagement, NSID: h.nsid, CDW10: uint32(nr - 1), CDW11: nvme.DSMDeallocate}
		cpl, err := h.IO(ctx, &cmd, data[:nr*nvme.DSMRangeSize])
		if err == nil {
			err = cpl.Err()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// WriteZeroes zeroes [off, off+length) with Write Zeroes commands; the
// blocks may be deallocated unless flags has nbd.FlagNoHole.
// nbd.FlagFastZero is refused with ENOTSUP: NVMe cannot promise speed.
func (h *Host) WriteZeroes(ctx context.Context, off, length int64, flags nbd.CmdFlags) error {
	if flags.Has(nbd.FlagFastZero) {
		return fmt.Errorf("nvme/tcp: fast zero: %w", syscall.ENOTSUP)
	}
	if _, err := h.check(int(min(length, 1<<40)), off, false); err != nil {
		return err
	}
	var cdw12 uint32
	if !flags.Has(nbd.FlagNoHole) {
		cdw12 = nvme.CDW12Deallocate
	}
	for length > 0 {
		n := min(length, int64(h.maxTransfer))
		cmd := nvme.Command{Opcode: nvme.OpWriteZeroes, NSID: h.nsid, CDW12: cdw12}
		cmd.SetRange(uint64(off>>h.shift), uint32(n>>h.shift))
		cpl, err := h.IO(ctx, &cmd, nil)
		if err == nil {
			err = cpl.Err()
		}
		if err != nil {
			return err
		}
		off, length = off+n, length-n
	}
	return nil
}

// Discover reads the discovery log of the discovery controller at addr
// (the port defaults to 8009). cfg may be nil. It reads the log's header,
// its entries one by one, then the header again, and starts over if the
// log's GENCTR changed meanwhile (the entries changed while read); after
// discoverTries such rounds it fails with ErrDiscoveryChanged.
func Discover(ctx context.Context, addr string, cfg *Config) ([]nvme.DiscoveryLogEntry, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c.defaults()
	c.KeepAlive = -1
	q, _, cc, err := connectAdmin(ctx, hostAddr(addr, "8009"), nvme.DiscoveryNQN, &c)
	if err != nil {
		return nil, err
	}
	defer func() {
		q.property(ctx, true, nvme.PropCC, uint64(cc|nvme.CCShutdown))
		q.close()
	}()
	page := make([]byte, nvme.DiscoveryLogPageSize)
	for range discoverTries {
		gen, es, err := q.discoveryLog(ctx, page)
		if err != nil {
			return nil, err
		}
		if err := q.logPage(ctx, nvme.LogDiscovery, 0, page); err != nil {
			return nil, err
		}
		var hd nvme.DiscoveryLogHeader
		if hd.Parse((*[nvme.DiscoveryLogPageSize]byte)(page)); hd.GenCtr == gen {
			return es, nil
		}
	}
	return nil, ErrDiscoveryChanged
}

// discoverTries bounds Discover's rounds.
const discoverTries = 8

// discoveryLog reads the discovery log's header and then its entries,
// each in its own command, through page; it returns the header's GENCTR
// and the entries.
func (q *hostQueue) discoveryLog(ctx context.Context, page []byte) (uint64, []nvme.DiscoveryLogEntry, error) {
	if err := q.logPage(ctx, nvme.LogDiscovery, 0, page); err != nil {
		return 0, nil, err
	}
	var hd nvme.DiscoveryLogHeader
	hd.Parse((*[nvme.DiscoveryLogPageSize]byte)(page))
	es := make([]nvme.DiscoveryLogEntry, min(hd.NumRec, 1024))
	for i := range es {
		if err := q.logPage(ctx, nvme.LogDiscovery, uint64(nvme.DiscoveryLogPageSize*(i+1)), page); err != nil {
			return 0, nil, err
		}
		es[i].Parse((*[nvme.DiscoveryLogPageSize]byte)(page))
	}
	return hd.GenCtr, es, nil
}

func (q *hostQueue) logPage(ctx context.Context, lid uint8, off uint64, page []byte) error {
	var cmd nvme.Command
	nvme.GetLogPage{LID: lid, Length: uint64(len(page)), Offset: off, RAE: true}.Encode(&cmd)
	cpl, err := q.do(ctx, &cmd, page, nil)
	if err == nil {
		err = cpl.Err()
	}
	if err != nil {
		return fmt.Errorf("nvme/tcp: get log page %#x: %w", lid, err)
	}
	return nil
}

var _ nbd.Backend = (*Host)(nil)
var _ nbd.Flusher = (*Host)(nil)
var _ nbd.FUAWriter = (*Host)(nil)
var _ nbd.Trimmer = (*Host)(nil)
var _ nbd.Zeroer = (*Host)(nil)
