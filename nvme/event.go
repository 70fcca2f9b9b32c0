package nvme

// Asynchronous events (NVMe Base 2.0, 5.2): a host leaves Asynchronous
// Event Requests with the controller, which completes one when an event
// it reports happens. This controller reports one event, Namespace
// Attribute Changed (OAES bit 8), raised when a namespace of its
// subsystem is added, removed or resized through the Fabric; the host
// enables it with Set Features Asynchronous Event Configuration and
// reads which namespaces changed in the Changed Namespace List log page,
// which, read without Retain Asynchronous Event, clears the list and
// unmasks the event.

// OAES and Asynchronous Event Configuration bits.
const (
	OAESNamespaceAttr = 1 << 8 // Namespace Attribute Notices
)

// Asynchronous event types and the information of a notice (AER
// completion dword 0: bits 2:0 type, 15:8 information, 23:16 log page).
const (
	AsyncEventNotice           = 2
	AsyncInfoNamespaceAttrChng = 0x00
)

// AsyncEvent is the dword 0 of an Asynchronous Event Request's
// completion.
type AsyncEvent struct {
	Type uint8
	Info uint8
	LID  uint8
}

// AsyncEventOf decodes the result of an Asynchronous Event Request.
func AsyncEventOf(result uint64) AsyncEvent {
	return AsyncEvent{Type: uint8(result) & 7, Info: uint8(result >> 8), LID: uint8(result >> 16)}
}

// Result encodes e as an Asynchronous Event Request's result.
func (e AsyncEvent) Result() uint64 {
	return uint64(e.Type&7) | uint64(e.Info)<<8 | uint64(e.LID)<<16
}

// changedListMax is the most namespace ids the Changed Namespace List
// holds; past it the list is the single id 0xFFFFFFFF.
const changedListMax = IdentifySize / 4

// events is a controller's event state, guarded by Controller.mu.
type events struct {
	changed []uint32 // the Changed Namespace List
	pending bool     // a Namespace Attribute Changed event not yet reported
	masked  bool     // reported, its log page not yet read
}

// asyncEventRequest holds an Asynchronous Event Request, or completes it
// at once with an event that waits for one.
func (c *Controller) asyncEventRequest(cmd *Command) (uint64, Status, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.aers) >= aerLimit {
		return 0, StatusAERLimitExceeded | StatusDNR, false
	}
	if r, ok := c.takeEvent(); ok {
		return r, StatusSuccess, false
	}
	c.aers = append(c.aers, cmd.CID)
	return 0, StatusSuccess, true
}

// takeEvent returns the result of an event ready to report, masking it.
func (c *Controller) takeEvent() (uint64, bool) {
	if !c.ev.pending || c.ev.masked {
		return 0, false
	}
	c.ev.pending, c.ev.masked = false, true
	return AsyncEvent{Type: AsyncEventNotice, Info: AsyncInfoNamespaceAttrChng, LID: LogChangedNamespaces}.Result(), true
}

// outbox is completions of held requests that a controller decided on
// under c.mu and sends, with send, once c.mu is released: a transport's
// Complete is never called with the controller's lock held, so a
// transport slow to take a completion cannot stall the controller (its
// Keep Alive Timer, the Fabric's namespace changes).
type outbox struct {
	c    *Controller
	t    Transport
	cpls []Completion
}

// post adds cpl, for the admin queue's transport, to the completions to
// send. c.mu is held.
func (c *Controller) post(b *outbox, cpl Completion) {
	q := c.queues[0]
	if c.dead || q == nil || q.Transport == nil {
		return
	}
	if b.c == nil {
		b.c, b.t = c, q.Transport
		c.sending.Add(1) // end waits for send: never a Complete after Close
	}
	b.cpls = append(b.cpls, cpl)
}

// send sends the completions posted to b. c.mu must not be held.
func (b *outbox) send() {
	if b.c == nil {
		return
	}
	for _, cpl := range b.cpls {
		b.t.Complete(cpl)
	}
	b.c.sending.Done()
}

// deliver completes a held request with an event ready to report, if
// both are there, through b. c.mu is held.
func (c *Controller) deliver(b *outbox) {
	if len(c.aers) == 0 || c.dead || c.queues[0] == nil || c.queues[0].Transport == nil {
		return
	}
	r, ok := c.takeEvent()
	if !ok {
		return
	}
	cid := c.aers[0]
	c.aers = append(c.aers[:0], c.aers[1:]...)
	c.post(b, Completion{CID: cid, Result: r})
}

// abortEvents returns the held requests' completions as aborted (a
// controller reset), to send once c.mu is released. c.mu is held.
func (c *Controller) abortEvents() (b outbox) {
	for _, cid := range c.aers {
		c.post(&b, Completion{CID: cid, Status: StatusAbortedSQDeletion})
	}
	c.aers = c.aers[:0]
	c.ev = events{changed: c.ev.changed[:0]}
	return b
}

// namespaceChanged records that namespace nsid changed, and reports it if
// the host enabled the event.
func (c *Controller) namespaceChanged(nsid uint32) {
	var b outbox
	defer b.send() // after c.mu is released: defers run last in, first out
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return
	}
	l := c.ev.changed
	switch {
	case len(l) == 1 && l[0] == 0xFFFFFFFF:
	case len(l) == changedListMax:
		c.ev.changed = append(l[:0], 0xFFFFFFFF)
	default:
		i := 0
		for i < len(l) && l[i] < nsid {
			i++
		}
		if i == len(l) || l[i] != nsid {
			c.ev.changed = append(l[:i], append([]uint32{nsid}, l[i:]...)...)
		}
	}
	if c.aec&OAESNamespaceAttr != 0 {
		c.ev.pending = true
		c.deliver(&b)
	}
}

// changedLog fills b with the Changed Namespace List; clear (the host
// did not set RAE) empties it and unmasks the event.
func (c *Controller) changedLog(b *[IdentifySize]byte, clearList bool) {
	var out outbox
	c.mu.Lock()
	PutNamespaceList(b, c.ev.changed)
	if clearList {
		c.ev.changed = c.ev.changed[:0]
		c.ev.masked = false
		c.deliver(&out)
	}
	c.mu.Unlock()
	out.send()
}

// ParseChangedNamespaces appends to dst the ids of a Changed Namespace
// List log page, up to the first zero (0xFFFFFFFF alone: more than 1024
// changed).
func ParseChangedNamespaces(b *[IdentifySize]byte, dst []uint32) []uint32 {
	return ParseNamespaceList(b, dst)
}
