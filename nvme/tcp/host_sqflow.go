package tcp

import (
	"context"
	"errors"

	"github.com/nhdkit/nhd/nvme"
)

// dialIOQueue connects I/O queue k.QID for slots commands in flight,
// asking for SQ flow control off (Connect CATTR bit 2, NVMe over Fabrics
// 1.1, figure 19): the host may then have as many commands in flight as
// the queue has entries, without reading the SQ head pointer, and a read
// that succeeds then ends with the C2HData SUCCESS flag and no
// CapsuleResp, one PDU fewer (the transport allows SUCCESS on such queues
// only; nvmet-tcp and this package's Server send it there, nvme-tcp-facts
// §1). A controller that does not offer it (TREQ bit 2 of its discovery
// log entry) may refuse such a Connect with Invalid Field or Connect
// Invalid Parameters: the queue is then dialled again with SQ flow control
// on and one entry more (usableSlots), which slots at most CAP.MQES
// leaves room for.
func dialIOQueue(ctx context.Context, addr string, cfg *Config, slots int, k nvme.Connect, d *nvme.ConnectData) (*hostQueue, uint64, error) {
	k.CATTR |= nvme.CATTRNoSQFlow
	k.SQSize = uint16(max(slots-1, 1)) // SQSIZE 0 is invalid
	q, res, err := dialQueue(ctx, addr, cfg, k, d)
	if refusedNoSQFlow(err) {
		k.CATTR &^= nvme.CATTRNoSQFlow
		k.SQSize = uint16(slots)
		return dialQueue(ctx, addr, cfg, k, d)
	}
	return q, res, err
}

// handshakeIO is dialIOQueue's handshake for a queue that reconnects
// with slots commands possibly in flight, asking for the same entries.
func handshakeIO(ctx context.Context, addr string, cfg *Config, slots int, k nvme.Connect, d *nvme.ConnectData) (*qconn, uint64, error) {
	k.CATTR |= nvme.CATTRNoSQFlow
	k.SQSize = uint16(max(slots-1, 1))
	c, res, err := handshake(ctx, addr, cfg, k, d)
	if refusedNoSQFlow(err) {
		k.CATTR &^= nvme.CATTRNoSQFlow
		k.SQSize = uint16(slots)
		return handshake(ctx, addr, cfg, k, d)
	}
	return c, res, err
}

// refusedNoSQFlow reports whether Connect failed as a controller that
// does not offer SQ flow control off refuses it.
func refusedNoSQFlow(err error) bool {
	var st nvme.Status
	return err != nil && errors.As(err, &st) && (errors.Is(st, nvme.StatusInvalidField) || errors.Is(st, nvme.StatusConnectInvalidParam))
}
