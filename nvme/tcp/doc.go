// Package tcp carries NVMe queues over TCP as described in the NVM Express
// TCP Transport Specification 1.0 (NVMe/TCP): the PDU codec, a target
// (Server) that serves the subsystems of an nvme.Fabric, and a host (Dial)
// that reads and writes a namespace.
//
// # PDUs
//
// Header is the 8-byte common header; ICReq, ICResp, CapsuleCmd,
// CapsuleResp, Data (H2CData and C2HData), R2T and TermReq are the
// headers of each PDU type, each with Put into and Parse from a fixed
// array, the spec's layout in its doc. Digest is the CRC32C of header and
// data digests. A malformed PDU is a *FatalError carrying the fatal error
// status and information a TermReq reports; errors.Is(err, ErrProtocol)
// matches all of them.
//
// # Target
//
//	f := &nvme.Fabric{Subsystems: []*nvme.Subsystem{{NQN: nqn,
//		Namespaces: []nvme.Namespace{{Backend: nbd.NewMemDisk(1 << 30)}}}}}
//	srv := &tcp.Server{Fabric: f}
//	l, _ := net.Listen("tcp", "127.0.0.1:4420")
//	go srv.Serve(l)
//
// Each connection is a queue served by a goroutine pair: a reader, which
// runs quick commands itself and starts those of a backend that keeps
// requests in flight (an *nbd.Client), and a worker, which finishes them
// or runs a slow backend's commands; see Server for the memory bound and
// the wire behaviour. The discovery
// subsystem (nvme.DiscoveryNQN) is served on every listener, so `nvme
// discover -t tcp -a 127.0.0.1 -s 4420` lists the subsystems.
//
// # Host
//
//	h, err := tcp.Dial(ctx, "127.0.0.1:4420", nqn, &tcp.Config{IOQueues: 4})
//	...
//	defer h.Close()
//	_, err = h.ReadAt(buf, off)
//
// A *Host has an admin queue and I/O queues on their own connections,
// with many commands in flight on each (a queue takes up to
// Config.QueueFill of them before the next one takes any); it is an
// io.ReaderAt and io.WriterAt and an nbd.Backend with Flusher, FUAWriter,
// Trimmer and Zeroer. Writes up to the controller's in-capsule size go in the command
// capsule, larger ones answer the controller's R2T; reads land straight
// in the caller's buffer. Discover reads a discovery log.
//
// When a connection drops, the host reconnects as Linux's does: after
// Config.ReconnectDelay it makes a new association (same host NQN and
// ID) and sends the I/O commands in flight again, reads and writes; only
// once Config.LossTimeout passes do they fail, with ErrControllerLost.
// A Host sends a Keep Alive every half of Config.KeepAlive, and follows
// its namespace as Linux's host does: it enables the controller's
// Namespace Attribute Notices and keeps an Asynchronous Event Request
// with it, and when its namespace changes it takes the new size (Size)
// and calls Config.NamespaceChanged.
//
// The Server ends a controller's association when its Keep Alive Timer
// expires (every queue's connection closes) and completes Asynchronous
// Event Requests when the Fabric's namespaces change.
package tcp
