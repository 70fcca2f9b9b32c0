// Package nvme implements the controller side of the NVM Express command
// set as NVMe over Fabrics carries it: typed submission and completion
// queue entries, the data structures of Identify, Get Log Page, Features
// and the Fabrics commands (NVMe Base 2.0, NVM Command Set 1.0, NVMe over
// Fabrics 1.1), and a transport-independent Fabric that serves any
// nbd.Backend as an NVMe namespace.
//
// # Wire structures
//
// Each structure is a Go type with Put into a fixed-size array and Parse
// from one, with the spec's layout in its doc: Command (64-byte SQE),
// Completion (16-byte CQE), IdentifyController, IdentifyNamespace,
// DiscoveryLogHeader and DiscoveryLogEntry, SMARTLog, ErrorLogEntry,
// ConnectData and DSMRange. The fields that live in command dwords have
// decoders and encoders: ConnectOf and Connect.Encode, PropertyOf and
// Property.Encode, LogPageOf and GetLogPage.Encode, NumberOfQueues and
// QueuesOf, Command.LBA, Blocks and SetRange. Put and Parse never
// allocate.
//
// # Status codes
//
// Status is a completion's status field and an error: errors.Is matches
// it against a Status of the same code and against the syscall.Errno (and
// nbd.Errno) a block layer would see, so errors.Is(err, syscall.EIO) holds
// for an internal or media error. StatusOf goes the other way, choosing
// the status for a backend's error.
//
// # Controller
//
// A Fabric holds Subsystems by NQN, each with Namespaces over nbd.Backend
// values, and the discovery subsystem (DiscoveryNQN). A transport makes a
// Queue per connection and passes it each command with its data buffer:
//
//	f := &nvme.Fabric{Subsystems: []*nvme.Subsystem{{
//		NQN:        "nqn.2026-01.io.example:disk",
//		Namespaces: []nvme.Namespace{{Backend: nbd.NewMemDisk(1 << 30)}},
//	}}}
//	q := f.NewQueue()
//	cpl, held := q.Exec(ctx, &cmd, data)
//
// The first command of a queue is a Fabrics Connect: on queue 0 it makes
// a controller, on the others it joins one. Property Get and Set reach
// CAP, VS, CC and CSTS; the host enables the controller by setting CC.EN.
// Admin commands: Identify (controller, namespace, active namespace list,
// namespace identification descriptors, I/O command set), Get Log Page
// (error information, SMART / health, changed namespace list, discovery),
// Get and Set Features (Number of Queues, Async Event Configuration, Keep
// Alive Timer, Volatile Write Cache and a few with nothing to set), Keep
// Alive and Asynchronous Event Request. I/O commands: Read, Write (FUA
// through nbd.FUAWriter or a Flush), Flush, Write Zeroes (through
// nbd.Zeroer, else by writing zeroes) and Dataset Management deallocate
// (through nbd.Trimmer). Every failure completes with its status and is
// kept in the error log.
//
// A namespace whose backend keeps requests in flight (AsyncReaderAt,
// AsyncWriterAt: an *nbd.Client) lets a transport start a Read or Write
// with Queue.Start and complete it with Queue.Finish on another
// goroutine, so one goroutine keeps a queue's reads and writes in flight
// where Exec would block one per command; Start declines what Exec must
// run or fail itself.
//
// # Keep Alive and asynchronous events
//
// A controller whose host sets a Keep Alive Timeout and then sends no
// Keep Alive for that long (rounded up to whole seconds, plus
// Fabric.KeepAliveSlack) ends its association: it asks each queue's
// Transport to Abort. Fabric.AddNamespace, RemoveNamespace and
// ResizeNamespace change a subsystem at run time; each of its
// controllers then raises Namespace Attribute Changed (OAES bit 8),
// completing a held Asynchronous Event Request through Transport.Complete,
// and lists the ids in the Changed Namespace List log page.
//
// The nvme/tcp package carries queues over NVMe/TCP, as a target and as a
// host.
package nvme
