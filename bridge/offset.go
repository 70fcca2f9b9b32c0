package bridge

// offsetError is the error of a request made at byte off, which a device
// reports at off's sector rather than at the sector of the call that
// returned it (ata.OffsetError once the device honours it).
func offsetError(off int64, err error) error { return &deferredError{Off: off, Err: err} }

// deferredError stands in for ata.OffsetError until package ata has it.
type deferredError struct {
	Off int64
	Err error
}

func (e *deferredError) Error() string { return e.Err.Error() }
func (e *deferredError) Unwrap() error { return e.Err }
