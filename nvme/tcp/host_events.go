package tcp

import (
	"context"
	"encoding/binary"

	"github.com/nhdkit/nhd/nvme"
)

// Namespace changes (NVMe Base 2.0: the Asynchronous Event Request
// command and the Changed Namespace List log page), as Linux's host
// follows them: when the controller advertises Namespace Attribute
// Notices (OAES bit 8), the host enables them (Set Features Asynchronous
// Event Configuration) before it identifies its namespace, and keeps an
// Asynchronous Event Request with the controller. When that completes
// with Namespace Attribute Changed, the host reads the Changed Namespace
// List (which clears the list and unmasks the event), identifies its
// namespace again if the list names it, takes its new size, calls
// Config.NamespaceChanged, and sends the next request. The watch ends
// with its admin queue (Close, or a reconnection, which starts a new
// one).

// enableNotices turns the controller's Namespace Attribute Notices on,
// if it has them, before the host identifies its namespace: a change
// from then on is reported to the first request the watch sends.
func (h *Host) enableNotices(ctx context.Context, admin *hostQueue, id *nvme.IdentifyController) {
	h.notices = false
	if id.OAES&nvme.OAESNamespaceAttr == 0 {
		return
	}
	cmd := nvme.Command{Opcode: nvme.OpSetFeatures, CDW10: nvme.FeatAsyncEventConfig, CDW11: nvme.OAESNamespaceAttr}
	cpl, err := admin.do(ctx, &cmd, nil, nil)
	h.notices = err == nil && cpl.Err() == nil
}

// watchNamespace starts the watch on admin, if the notices are on.
func (h *Host) watchNamespace(admin *hostQueue) {
	if !h.notices {
		return
	}
	h.watch.Add(1)
	go func() {
		defer h.watch.Done()
		h.watchEvents(admin)
	}()
}

func (h *Host) watchEvents(admin *hostQueue) {
	ctx := context.Background() // the admin queue's end ends every call
	page := make([]byte, nvme.IdentifySize)
	for {
		cmd := nvme.Command{Opcode: nvme.OpAsyncEventRequest}
		cpl, err := admin.do(ctx, &cmd, nil, nil)
		if err != nil || cpl.Err() != nil {
			return // the queue ended, or the controller takes no request
		}
		ev := nvme.AsyncEventOf(cpl.Result)
		if ev.Type != nvme.AsyncEventNotice || ev.Info != nvme.AsyncInfoNamespaceAttrChng {
			continue
		}
		ours, err := h.changedNamespaces(ctx, admin, page)
		if err != nil {
			return
		}
		if ours && h.reidentify(ctx, admin, page) != nil {
			return
		}
	}
}

// changedNamespaces reads the Changed Namespace List, clearing it, and
// reports whether it names the host's namespace (or overflowed).
func (h *Host) changedNamespaces(ctx context.Context, admin *hostQueue, page []byte) (bool, error) {
	var cmd nvme.Command
	nvme.GetLogPage{LID: nvme.LogChangedNamespaces, Length: uint64(len(page))}.Encode(&cmd)
	cpl, err := admin.do(ctx, &cmd, page, nil)
	if err == nil {
		err = cpl.Err()
	}
	if err != nil {
		return false, err
	}
	for i := 0; i+4 <= len(page); i += 4 {
		switch id := binary.LittleEndian.Uint32(page[i:]); id {
		case 0:
			return false, nil
		case h.nsid, 0xFFFFFFFF:
			return true, nil
		}
	}
	return false, nil
}

// reidentify reads the namespace's Identify data again and takes its
// size: a namespace made inactive has none.
func (h *Host) reidentify(ctx context.Context, admin *hostQueue, page []byte) error {
	clear(page)
	if err := admin.identify(ctx, nvme.CNSNamespace, h.nsid, page); err != nil {
		return err
	}
	var ns nvme.IdentifyNamespace
	ns.Parse((*[nvme.IdentifySize]byte)(page))
	size := int64(0)
	if ns.BlockSize() == 1<<h.shift {
		size = int64(ns.Size) << h.shift
	}
	h.resized(size)
	return nil
}

// resized takes size as the namespace's and, if it changed, tells
// Config.NamespaceChanged, one call at a time (a watch on a closed
// admin queue may still be finishing when a reconnection calls).
func (h *Host) resized(size int64) {
	h.resizeMu.Lock()
	defer h.resizeMu.Unlock()
	if h.size.Swap(size) != size && h.cfg.NamespaceChanged != nil {
		h.cfg.NamespaceChanged(size)
	}
}
