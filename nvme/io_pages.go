package nvme

import "github.com/nhdkit/nhd/nbd"

// pageWrite returns the namespace, its backend as an nbd.PageTaker, and
// the byte range of cmd when cmd is a Write without FUA of whole pages at
// a page boundary that Exec would run on such a backend; t is nil
// otherwise.
func (q *Queue) pageWrite(cmd *Command) (ns *namespace, t nbd.PageTaker, off, length int64) {
	if cmd.Opcode != OpWrite || cmd.CDW12&CDW12FUA != 0 {
		return nil, nil, 0, 0
	}
	if ns = q.ioNamespace(cmd); ns == nil || ns.ReadOnly {
		return nil, nil, 0, 0
	}
	t, isTaker := ns.Backend.(nbd.PageTaker)
	off, length, inside := ns.span(cmd)
	if !isTaker || !inside || length == 0 || length%nbd.PageSize != 0 || off%nbd.PageSize != 0 {
		return nil, nil, 0, 0
	}
	return ns, t, off, length
}

// TakesPages returns how many nbd.PageSize pages WritePages would take
// cmd's data as, or 0 for a command it would not run: any but a Write
// without FUA of whole pages at a page boundary, on an I/O queue whose
// namespace's backend is an nbd.PageTaker, that Exec would run. A caller
// asks before it reads the command's data, to read it into pages. Like
// Exec, it is safe for concurrent use.
func (q *Queue) TakesPages(cmd *Command) int {
	_, t, _, length := q.pageWrite(cmd)
	if t == nil {
		return 0
	}
	return int(length / nbd.PageSize)
}

// WritePages runs cmd, a Write for which TakesPages reports len(pages),
// whose data is pages in order, by handing each page to the backend
// (nbd.PageTaker.TakePage) instead of having it copy the bytes: pages[i]
// is then the page the backend gave back for reuse (nil if it gave none),
// the caller's from then on. A page the backend does not take is written
// with WriteAt and stays in pages. The completion carries the status of
// the first WriteAt that failed, the pages before it written, the rest
// not. ok is false, and nothing is done, when TakesPages would not report
// len(pages) (the controller or namespace changed): the caller then runs
// Exec with the pages' bytes. Like Exec, it is safe for concurrent use.
func (q *Queue) WritePages(cmd *Command, pages []*[nbd.PageSize]byte) (cpl Completion, ok bool) {
	ns, t, off, length := q.pageWrite(cmd)
	if t == nil || length != int64(len(pages))*nbd.PageSize {
		return Completion{}, false
	}
	q.ctrl.sub.countWrite(length)
	cpl = Completion{CID: cmd.CID, SQID: q.id}
	for i, p := range pages {
		at := off + int64(i)*nbd.PageSize
		if old, taken := t.TakePage(p, at); taken {
			pages[i] = old
			continue
		}
		if _, err := ns.Backend.WriteAt(p[:], at); err != nil {
			cpl.Status = StatusOf(err)
			break
		}
	}
	return cpl, true
}
