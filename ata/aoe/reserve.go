package aoe

// ReserveCmd is the sub-command of a reserve/release request (AoEr11 3.4).
type ReserveCmd uint8

const (
	ReserveRead     ReserveCmd = 0
	ReserveSet      ReserveCmd = 1
	ReserveForceSet ReserveCmd = 2
)

func (c ReserveCmd) String() string {
	switch c {
	case ReserveRead:
		return "Read"
	case ReserveSet:
		return "Set"
	case ReserveForceSet:
		return "ForceSet"
	}
	return "ReserveCmd(" + itoa(int(c)) + ")"
}

// ReserveArg is the argument of a reserve/release frame at offset 24:
//
//	24 rcmd | 25 nmacs | 26+6i MAC i
//
// An empty list releases the target. Parsing appends to MACs' backing
// array; a padded frame is accepted (its length past the list is ignored).
type ReserveArg struct {
	Cmd  ReserveCmd
	MACs []MAC
}

const reserveArgSize = 2

// ParseReserveArg decodes the reserve/release argument of frame.
func ParseReserveArg(frame []byte, r *ReserveArg) error {
	if len(frame) < HeaderSize+reserveArgSize {
		return ErrShort
	}
	b := frame[HeaderSize:]
	n := int(b[1])
	if len(b) < reserveArgSize+6*n {
		return ErrShort
	}
	r.Cmd = ReserveCmd(b[0])
	r.MACs = r.MACs[:0]
	for i := range n {
		var m MAC
		copy(m[:], b[reserveArgSize+6*i:])
		r.MACs = append(r.MACs, m)
	}
	return nil
}

// Append appends the encoded argument to b.
func (r *ReserveArg) Append(b []byte) ([]byte, error) {
	if len(r.MACs) > 255 {
		return b, ErrTooLong
	}
	b = append(b, uint8(r.Cmd), uint8(len(r.MACs)))
	for _, m := range r.MACs {
		b = append(b, m[:]...)
	}
	return b, nil
}
