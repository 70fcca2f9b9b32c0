package aoe

// MaskCmd is the sub-command of a MAC mask list request (AoEr11 3.3).
type MaskCmd uint8

const (
	MaskRead MaskCmd = 0
	MaskEdit MaskCmd = 1
)

func (c MaskCmd) String() string {
	switch c {
	case MaskRead:
		return "Read"
	case MaskEdit:
		return "Edit"
	}
	return "MaskCmd(" + itoa(int(c)) + ")"
}

// MaskError is the merror field of a MAC mask list reply.
type MaskError uint8

const (
	MaskErrUnspecified  MaskError = 1
	MaskErrBadDirective MaskError = 2
	MaskErrListFull     MaskError = 3
)

// DirCmd is what one directive of a mask edit does.
type DirCmd uint8

const (
	DirNone   DirCmd = 0
	DirAdd    DirCmd = 1
	DirDelete DirCmd = 2
)

// Directive is one 8-byte entry of a MAC mask list: reserved, dcmd, MAC.
type Directive struct {
	Cmd DirCmd
	MAC MAC
}

// MaskArg is the argument of a MAC mask list frame at offset 24:
//
//	24 reserved | 25 mcmd | 26 merror | 27 dcnt | 28+8i directive i
//
// Parsing fills Directives by appending to its existing backing array.
type MaskArg struct {
	Cmd        MaskCmd
	Error      MaskError
	Directives []Directive
}

const maskArgSize = 4

// ParseMaskArg decodes the MAC mask list argument of frame.
func ParseMaskArg(frame []byte, m *MaskArg) error {
	if len(frame) < HeaderSize+maskArgSize {
		return ErrShort
	}
	b := frame[HeaderSize:]
	n := int(b[3])
	if len(b) < maskArgSize+8*n {
		return ErrShort
	}
	m.Cmd, m.Error = MaskCmd(b[1]), MaskError(b[2])
	m.Directives = m.Directives[:0]
	for i := range n {
		d := b[maskArgSize+8*i:]
		var e Directive
		e.Cmd = DirCmd(d[1])
		copy(e.MAC[:], d[2:8])
		m.Directives = append(m.Directives, e)
	}
	return nil
}

// Append appends the encoded argument to b.
func (m *MaskArg) Append(b []byte) ([]byte, error) {
	if len(m.Directives) > 255 {
		return b, ErrTooLong
	}
	b = append(b, 0, uint8(m.Cmd), uint8(m.Error), uint8(len(m.Directives)))
	for _, d := range m.Directives {
		b = append(b, 0, uint8(d.Cmd))
		b = append(b, d.MAC[:]...)
	}
	return b, nil
}
