package nbd

// check validates a request against the export and what was negotiated
// (proto.md, "Error values"): EINVAL for unknown commands, flags not
// valid for the command, features not advertised, reads and trims past
// the end and misaligned requests; ENOSPC for writes past the end; EPERM
// for changes to a read-only export.
func (c *serverConn) check(r *Request) (Errno, string) {
	x := c.export
	allowed := CmdFlags(0)
	if c.flags.Has(ExportSendFUA) {
		allowed |= FlagFUA
	}
	switch r.Type {
	case CmdRead:
		if c.structured {
			allowed |= FlagDF
		}
	case CmdWriteZeroes:
		allowed |= FlagNoHole | FlagFastZero
	case CmdBlockStatus:
		allowed |= FlagReqOne
	case CmdWrite, CmdFlush, CmdTrim, CmdCache:
	default:
		return EINVAL, "unknown command"
	}
	if r.Flags&^allowed != 0 {
		return EINVAL, "command flag not valid here"
	}
	switch r.Type {
	case CmdWrite, CmdTrim, CmdWriteZeroes:
		if x.ReadOnly {
			return EPERM, "export is read-only"
		}
	}
	switch r.Type {
	case CmdFlush:
		if x.flusher == nil {
			return EINVAL, "flush not supported"
		}
		if r.Offset != 0 || r.Length != 0 {
			return EINVAL, "flush with nonzero offset or length"
		}
		return 0, ""
	case CmdTrim:
		if x.trimmer == nil {
			return EINVAL, "trim not supported"
		}
	case CmdBlockStatus:
		if !c.statusOK {
			return EINVAL, "no metadata context negotiated"
		}
		if r.Length == 0 {
			return EINVAL, "block status of length 0"
		}
	}
	off, n := r.Offset, uint64(r.Length)
	if off > x.size || n > x.size-off {
		if r.Type == CmdWrite || r.Type == CmdWriteZeroes {
			return ENOSPC, "write past the end of the export"
		}
		return EINVAL, "request past the end of the export"
	}
	if x.minBlock > 1 && (off|n)&uint64(x.minBlock-1) != 0 {
		return EINVAL, "request not aligned to the minimum block size"
	}
	switch r.Type {
	case CmdRead:
		if r.Length > x.maxPayload {
			if r.Flags.Has(FlagDF) {
				return EOVERFLOW, "read too large to send unfragmented"
			}
			return EINVAL, "read longer than the maximum payload"
		}
	case CmdCache:
		if r.Length > x.maxPayload {
			return EINVAL, "cache longer than the maximum payload"
		}
	}
	return 0, ""
}
