package nvme

import "time"

// The Keep Alive Timer (NVMe Base 2.0, 3.9): a controller whose host
// sets a Keep Alive Timeout (KATO, in Connect or Set Features) and then
// sends no Keep Alive command for that long ends its association, as if
// the host had gone: its queues' transports are aborted and the
// controller is freed. This controller does not advertise Traffic Based
// Keep Alive (CTRATT bit 6), so only Keep Alive commands restart the
// timer, as hosts that do not see TBKAS expect.

// DiscoveryKATO is the Keep Alive Timeout, in milliseconds, of a
// discovery controller whose host asks for none (Connect KATO 0): two
// minutes, as Linux's nvmet and persistent discovery controllers
// (TP 8013) use, so that a discovery connection a host leaves open does
// not hold its controller for ever. An I/O controller with KATO 0 has no
// timer.
const DiscoveryKATO = 120_000

// keepAliveTimeout returns how long c waits for a Keep Alive: KATO rounded
// up to whole seconds, as Linux's nvmet does, plus the fabric's slack; 0
// when KATO is 0 (the timer is off).
func (c *Controller) keepAliveTimeout() time.Duration {
	kato := c.kato.Load()
	if kato == 0 {
		return 0
	}
	return time.Duration((kato+999)/1000)*time.Second + c.f.keepAliveSlack()
}

func (f *Fabric) keepAliveSlack() time.Duration {
	switch {
	case f.KeepAliveSlack == 0:
		return DefaultKeepAliveSlack
	case f.KeepAliveSlack < 0:
		return 0
	}
	return f.KeepAliveSlack
}

// armKeepAlive (re)starts the timer as if a Keep Alive came now, or
// stops it when KATO is 0. c.mu is held.
func (c *Controller) armKeepAlive() {
	c.lastKA.Store(time.Now().UnixNano())
	if c.ka != nil {
		c.ka.Stop()
		c.ka = nil
	}
	if d := c.keepAliveTimeout(); d > 0 && !c.dead {
		c.ka = time.AfterFunc(d, c.keepAliveExpired)
	}
}

// keepAliveExpired runs when the timer fires: if a Keep Alive came since
// it was set, the timer is set again from that one; otherwise the
// association ends.
func (c *Controller) keepAliveExpired() {
	c.mu.Lock()
	d := c.keepAliveTimeout()
	if c.dead || c.ka == nil || d == 0 {
		c.mu.Unlock()
		return
	}
	if idle := time.Since(c.LastKeepAlive()); idle < d {
		c.ka.Reset(d - idle)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	c.end(nil)
}

// Ended reports whether c's association has ended: its admin queue closed
// or its Keep Alive Timer expired.
func (c *Controller) Ended() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dead
}

// end ends c's association: c is no longer found by Connect, its held
// commands are forgotten, and the transports of its queues other than
// closing are aborted, so that they close.
func (c *Controller) end(closing *Queue) {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	c.dead = true
	c.ready.Store(false)
	if c.ka != nil {
		c.ka.Stop()
		c.ka = nil
	}
	c.aers = c.aers[:0]
	var abort []Transport
	for i, q := range c.queues {
		if q != nil && q != closing && q.Transport != nil {
			abort = append(abort, q.Transport)
		}
		c.queues[i] = nil
	}
	c.mu.Unlock()
	c.sending.Wait() // the completions decided before dead was set
	c.f.mu.Lock()
	if c.f.ctrls[c.id] == c {
		delete(c.f.ctrls, c.id)
	}
	c.f.mu.Unlock()
	for _, t := range abort {
		t.Abort()
	}
}
