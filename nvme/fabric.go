package nvme

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nhdkit/nhd/nbd"
)

// Defaults of a Fabric's limits, used where its fields are zero.
const (
	// DefaultQueueDepth is the most entries of a queue (CAP.MQES + 1).
	DefaultQueueDepth = 128
	// DefaultMaxIOQueues is the most I/O queues of a controller.
	DefaultMaxIOQueues = 64
	// DefaultMDTS gives a largest transfer of 4 KiB << 5 = 128 KiB.
	DefaultMDTS = 5
	// DefaultKAS is the keep alive granularity advertised, in 100 ms.
	DefaultKAS = 10
	// DefaultKeepAliveSlack is the time a controller waits for a Keep
	// Alive past its timeout before it ends the association.
	DefaultKeepAliveSlack = 2 * time.Second
)

// Errors of a Fabric's configuration.
var (
	ErrBadConfig = errors.New("nvme: bad fabric configuration")
	// ErrNoSubsystem is returned for an NQN the Fabric does not serve.
	ErrNoSubsystem = errors.New("nvme: no such subsystem")
	// ErrNoNamespace is returned for a namespace id that is not active.
	ErrNoNamespace = errors.New("nvme: no such namespace")
)

// Namespace is one namespace of a Subsystem: a Backend seen as blocks.
type Namespace struct {
	// Backend holds the namespace's bytes. It is called from the
	// goroutines of every queue at once and must be safe for concurrent
	// use; its optional nbd interfaces are used when present: Flusher
	// (Flush, FUA writes, VWC advertised), FUAWriter, Zeroer (Write
	// Zeroes; otherwise zeroes are written), Trimmer (Dataset Management
	// deallocate; otherwise deallocate does nothing). Its Size is read
	// once, when the Fabric starts, and rounded down to whole blocks.
	Backend nbd.Backend
	// BlockSize is 512 or 4096; 0 means 512.
	BlockSize int
	// ReadOnly refuses writes with Namespace Is Write Protected.
	ReadOnly bool
	// UUID identifies the namespace to hosts; zero means derived from
	// the subsystem's NQN and the namespace id.
	UUID [16]byte
}

// Subsystem is an NVM subsystem served under its NQN: namespaces 1..n are
// Namespaces[0..n-1].
type Subsystem struct {
	NQN        string
	Serial     string // up to 20 ASCII characters; empty: derived from the NQN
	Model      string // up to 40; empty: "nhd"
	Firmware   string // up to 8; empty: "nhd"
	Namespaces []Namespace
}

// Fabric is the controller side of an NVMe over Fabrics target,
// independent of its transport: subsystems found by NQN, the discovery
// subsystem, and the controllers Connect commands create. A transport
// makes one Queue per connection and passes it every command it receives.
// Set the fields, then use it; they must not change afterwards. A Fabric
// is safe for concurrent use.
type Fabric struct {
	Subsystems []*Subsystem
	// Discovery returns the entries of the discovery log page for a
	// discovery controller whose admin queue has the transport address
	// local (Queue.Local: the address the host reached); the transport
	// sets it (nil: an empty log).
	Discovery func(local net.Addr) []DiscoveryLogEntry
	// QueueDepth bounds the entries of each queue (CAP.MQES + 1, at most
	// 65536); 0 means DefaultQueueDepth.
	QueueDepth int
	// MaxIOQueues bounds the I/O queues of a controller; 0 means
	// DefaultMaxIOQueues.
	MaxIOQueues int
	// MDTS sets the largest transfer of a command, 4 KiB << MDTS (1..15);
	// 0 means DefaultMDTS.
	MDTS uint8
	// InCapsuleSize is the in-capsule data an I/O queue of the transport
	// accepts (IOCCSZ), a multiple of 16 up to the largest transfer; 0
	// means the largest transfer, so that hosts send every write with its
	// command (no R2T round trip).
	InCapsuleSize int
	// KeepAliveSlack is added to a controller's Keep Alive Timeout
	// (KATO, rounded up to whole seconds as Linux's nvmet does) before
	// the controller, having had no Keep Alive for that long, ends its
	// association; 0 means DefaultKeepAliveSlack, negative means none.
	KeepAliveSlack time.Duration

	once  sync.Once
	err   error
	subs  map[string]*subsystem
	mu    sync.Mutex
	ctrls map[uint16]*Controller
	next  uint16
}

type subsystem struct {
	*Subsystem
	nsp   atomic.Pointer[[]*namespace] // by id - 1, nil: inactive; copied on change
	nsMu  sync.Mutex                   // serialises changes of nsp
	flush atomic.Bool                  // some namespace is a Flusher: VWC
	stats struct{ reads, writes, unitsRead, unitsWritten atomic.Uint64 }
}

type namespace struct {
	Namespace
	blocks uint64
	shift  uint
	uuid   [16]byte
}

func (f *Fabric) init() error {
	f.once.Do(func() { f.err = f.setup() })
	return f.err
}

func (f *Fabric) setup() error {
	if f.QueueDepth == 0 {
		f.QueueDepth = DefaultQueueDepth
	}
	if f.MaxIOQueues == 0 {
		f.MaxIOQueues = DefaultMaxIOQueues
	}
	if f.MDTS == 0 {
		f.MDTS = DefaultMDTS
	}
	if f.InCapsuleSize == 0 {
		f.InCapsuleSize = 4096 << f.MDTS
	}
	switch {
	case f.QueueDepth < 2 || f.QueueDepth > 65536:
		return fmt.Errorf("%w: queue depth %d", ErrBadConfig, f.QueueDepth)
	case f.MaxIOQueues < 1 || f.MaxIOQueues > 65535:
		return fmt.Errorf("%w: %d I/O queues", ErrBadConfig, f.MaxIOQueues)
	case f.MDTS > 15:
		return fmt.Errorf("%w: MDTS %d", ErrBadConfig, f.MDTS)
	case f.InCapsuleSize < 0 || f.InCapsuleSize%16 != 0 || f.InCapsuleSize > 4096<<f.MDTS:
		return fmt.Errorf("%w: in-capsule size %d", ErrBadConfig, f.InCapsuleSize)
	}
	f.subs = make(map[string]*subsystem)
	f.ctrls = make(map[uint16]*Controller)
	for _, s := range f.Subsystems {
		if err := f.addSubsystem(s); err != nil {
			return err
		}
	}
	return nil
}

func (f *Fabric) addSubsystem(s *Subsystem) error {
	if s.NQN == "" || len(s.NQN) > 223 || s.NQN == DiscoveryNQN || f.subs[s.NQN] != nil {
		return fmt.Errorf("%w: subsystem NQN %q empty, too long, reserved or repeated", ErrBadConfig, s.NQN)
	}
	sub := &subsystem{Subsystem: s}
	var nss []*namespace
	for i, n := range s.Namespaces {
		ns, err := newNamespace(s.NQN, uint32(i+1), n)
		if err != nil {
			return err
		}
		nss = append(nss, ns)
		if _, ok := n.Backend.(nbd.Flusher); ok {
			sub.flush.Store(true)
		}
	}
	sub.nsp.Store(&nss)
	f.subs[s.NQN] = sub
	return nil
}

// newNamespace checks n and makes namespace nsid of subsystem nqn.
func newNamespace(nqn string, nsid uint32, n Namespace) (*namespace, error) {
	if n.Backend == nil {
		return nil, fmt.Errorf("%w: %s namespace %d has no backend", ErrBadConfig, nqn, nsid)
	}
	bs := n.BlockSize
	if bs == 0 {
		bs = 512
	}
	if bs != 512 && bs != 4096 {
		return nil, fmt.Errorf("%w: %s namespace %d block size %d", ErrBadConfig, nqn, nsid, bs)
	}
	ns := &namespace{Namespace: n, uuid: n.UUID}
	ns.BlockSize = bs
	for ; 1<<ns.shift < bs; ns.shift++ {
	}
	ns.blocks = uint64(n.Backend.Size()) >> ns.shift
	if ns.uuid == [16]byte{} {
		h := sha256.Sum256(fmt.Appendf(nil, "%s/%d", nqn, nsid))
		copy(ns.uuid[:], h[:])
		ns.uuid[6] = ns.uuid[6]&0x0F | 0x50 // a name-based UUID
		ns.uuid[8] = ns.uuid[8]&0x3F | 0x80
	}
	return ns, nil
}

// Check validates the configuration (it is also done by the first
// NewQueue); it returns an error matching ErrBadConfig.
func (f *Fabric) Check() error { return f.init() }

// MaxTransfer returns the largest data transfer of one command.
func (f *Fabric) MaxTransfer() int {
	if f.init() != nil {
		return 4096 << DefaultMDTS
	}
	return 4096 << f.MDTS
}

// NewQueue returns a queue not yet connected: its first command must be a
// Connect. It panics if the configuration is bad (see Check).
func (f *Fabric) NewQueue() *Queue {
	if err := f.init(); err != nil {
		panic(err)
	}
	return &Queue{f: f}
}

// Transport is what a controller asks of the connection that carries
// one of its queues, for what it does on its own rather than in answer
// to Exec: complete a command Exec held, and end the connection when the
// controller ends its association. A transport sets it as
// Queue.Transport before the queue's first Exec.
type Transport interface {
	// Complete sends the completion of a command that Exec held (an
	// Asynchronous Event Request), at most once per held command. It is
	// called from any goroutine, possibly while Exec runs, but never
	// after Queue.Close returns, and never with the controller's locks
	// held; it must not call the Queue. It must not block (on a host
	// that does not read, say): the Fabric call that raised the event
	// (AddNamespace, RemoveNamespace, ResizeNamespace) waits for it, and
	// so does the end of the controller's association.
	Complete(cpl Completion)
	// Abort ends the connection: its controller is gone (its Keep Alive
	// Timer expired, or its admin queue closed). The transport then
	// closes the Queue as when the host disconnects. Abort is called
	// from any goroutine, must not block, and may be called more than
	// once.
	Abort()
}

// Queue is one submission/completion queue pair of a transport
// connection. Its first Exec (the Connect) and Close must not run
// concurrently with any other of its methods, nor the admin queue's Exec
// calls with one another. Once it is connected, an I/O queue's Exec,
// Start, Finish, LendRead, WritePage, TakesPages and WritePages may be
// called from several goroutines at once (a transport's reader and its
// workers). The queues of a controller run concurrently.
type Queue struct {
	// Local is the transport address the host reached this queue at,
	// set by the transport before the first Exec (nil if unknown); the
	// discovery log names it for listeners on an unspecified address.
	Local net.Addr
	// Transport, set before the first Exec, lets the controller complete
	// held commands and end the connection; nil means neither: held
	// commands never complete and an expired controller only fails the
	// queue's commands.
	Transport Transport

	f     *Fabric
	ctrl  *Controller
	id    uint16
	size  int
	noSQF bool
}

// Connected reports whether a Connect succeeded on q.
func (q *Queue) Connected() bool { return q.ctrl != nil }

// ID returns the queue id given by Connect (0: the admin queue).
func (q *Queue) ID() uint16 { return q.id }

// Size returns the entries of q as Connect set them (0 before).
func (q *Queue) Size() int { return q.size }

// SQFlowDisabled reports whether Connect turned SQ flow control off.
func (q *Queue) SQFlowDisabled() bool { return q.noSQF }

// KeepAlive returns the controller's keep alive timeout in ms (0: none).
func (q *Queue) KeepAlive() uint32 {
	if q.ctrl == nil {
		return 0
	}
	return q.ctrl.kato.Load()
}

// Controller returns the controller q belongs to, nil before Connect.
func (q *Queue) Controller() *Controller { return q.ctrl }

// Exec runs cmd, whose data buffer is data: for a command that sends data
// (a write) it holds the data received, for one that returns data (a
// read) Exec fills it; its length is the command's SGL length. It returns
// the completion, or held true for a command the controller keeps (an
// Asynchronous Event Request), which completes later through
// q.Transport.Complete when an event happens, or never if the queue
// closes first. A command that arrives on an I/O queue with a Transport
// after its controller's association ended (Keep Alive expiry, admin
// queue closed) is held too, never to complete: its transport is being
// aborted. Exec does not retain data. See Queue for which calls may run
// concurrently.
func (q *Queue) Exec(ctx context.Context, cmd *Command, data []byte) (cpl Completion, held bool) {
	cpl = Completion{CID: cmd.CID, SQID: q.id}
	var st Status
	switch {
	case cmd.Opcode == OpFabrics:
		cpl.Result, st = q.fabrics(cmd, data)
	case q.ctrl == nil:
		st = StatusCommandSequence | StatusDNR
	case q.id == 0:
		cpl.Result, st, held = q.ctrl.admin(ctx, cmd, data)
	case !q.ctrl.ready.Load():
		if q.Transport != nil && q.ctrl.Ended() {
			// The association is over and its transports are being
			// aborted: the command is dropped unanswered, as the
			// connection closes, so the host sends it again on its
			// next association rather than taking an error for it.
			return cpl, true
		}
		st = StatusCommandSequence | StatusDNR
	default:
		st = q.ctrl.sub.io(ctx, cmd, data)
	}
	cpl.Status, cpl.SQID = st, q.id
	if !st.Success() && q.ctrl != nil {
		q.ctrl.logError(q.id, cmd, st)
	}
	return cpl, held
}

// Close ends q. Closing the admin queue ends its controller: its I/O
// queues' transports are aborted, and its held commands forgotten.
func (q *Queue) Close() {
	c := q.ctrl
	if c == nil {
		return
	}
	q.ctrl = nil
	if q.id == 0 {
		c.end(q)
		return
	}
	c.mu.Lock()
	if c.queues[q.id] == q {
		c.queues[q.id] = nil
	}
	c.mu.Unlock()
}
