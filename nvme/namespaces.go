package nvme

import (
	"fmt"

	"github.com/nhdkit/nhd/nbd"
)

// A subsystem's namespaces change at run time through the Fabric:
// AddNamespace, RemoveNamespace and ResizeNamespace. The list is copied
// on each change and swapped atomically, so commands in flight finish on
// the namespace they found, and each controller of the subsystem raises
// a Namespace Attribute Changed event.

// namespaces returns the namespaces by id - 1, nil for an inactive id.
// The slice must not be changed.
func (s *subsystem) namespaces() []*namespace { return *s.nsp.Load() }

// namespace returns namespace nsid, nil if it is not active.
func (s *subsystem) namespace(nsid uint32) *namespace {
	l := *s.nsp.Load()
	if nsid == 0 || nsid > uint32(len(l)) {
		return nil
	}
	return l[nsid-1]
}

// subsystem returns the subsystem nqn, after checking the configuration.
func (f *Fabric) subsystem(nqn string) (*subsystem, error) {
	if err := f.init(); err != nil {
		return nil, err
	}
	if s := f.subs[nqn]; s != nil {
		return s, nil
	}
	return nil, fmt.Errorf("%w: %q", ErrNoSubsystem, nqn)
}

// change replaces the namespace list of s by what edit makes of a copy,
// then tells the subsystem's controllers that namespace nsid changed.
func (f *Fabric) change(s *subsystem, edit func(l []*namespace) ([]*namespace, uint32, error)) (uint32, error) {
	s.nsMu.Lock()
	l, nsid, err := edit(append([]*namespace(nil), s.namespaces()...))
	if err == nil {
		s.nsp.Store(&l)
	}
	s.nsMu.Unlock()
	if err != nil {
		return 0, err
	}
	f.mu.Lock()
	var cs []*Controller
	for _, c := range f.ctrls {
		if c.sub == s {
			cs = append(cs, c)
		}
	}
	f.mu.Unlock()
	for _, c := range cs {
		c.namespaceChanged(nsid)
	}
	return nsid, nil
}

// AddNamespace adds n to subsystem nqn under the lowest inactive id, which
// it returns. Subsystem.Namespaces is not changed: it is the initial set.
// Controllers of the subsystem raise a Namespace Attribute Changed event.
func (f *Fabric) AddNamespace(nqn string, n Namespace) (uint32, error) {
	s, err := f.subsystem(nqn)
	if err != nil {
		return 0, err
	}
	return f.change(s, func(l []*namespace) ([]*namespace, uint32, error) {
		i := 0
		for i < len(l) && l[i] != nil {
			i++
		}
		ns, err := newNamespace(nqn, uint32(i+1), n)
		if err != nil {
			return nil, 0, err
		}
		if i == len(l) {
			l = append(l, nil)
		}
		l[i] = ns
		if _, ok := n.Backend.(nbd.Flusher); ok {
			s.flush.Store(true)
		}
		return l, uint32(i + 1), nil
	})
}

// RemoveNamespace makes namespace nsid of subsystem nqn inactive: new
// commands to it fail with Invalid Namespace; those in flight finish.
func (f *Fabric) RemoveNamespace(nqn string, nsid uint32) error {
	return f.changeActive(nqn, nsid, func(*namespace) *namespace { return nil })
}

// ResizeNamespace reads the Size of namespace nsid's Backend again, after
// the caller grew or shrank it, and makes it the namespace's size.
func (f *Fabric) ResizeNamespace(nqn string, nsid uint32) error {
	return f.changeActive(nqn, nsid, func(old *namespace) *namespace {
		ns := *old
		ns.blocks = uint64(ns.Backend.Size()) >> ns.shift
		return &ns
	})
}

// changeActive replaces active namespace nsid of subsystem nqn with what
// edit makes of it (nil: inactive), as one namespace change.
func (f *Fabric) changeActive(nqn string, nsid uint32, edit func(*namespace) *namespace) error {
	s, err := f.subsystem(nqn)
	if err != nil {
		return err
	}
	_, err = f.change(s, func(l []*namespace) ([]*namespace, uint32, error) {
		if nsid == 0 || nsid > uint32(len(l)) || l[nsid-1] == nil {
			return nil, 0, fmt.Errorf("%w: %d of %s", ErrNoNamespace, nsid, nqn)
		}
		l[nsid-1] = edit(l[nsid-1])
		return l, nsid, nil
	})
	return err
}
