package nvme

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

// Round-trip properties: encode a random value, decode it, get it back.

// genText draws a string of printable ASCII without trailing spaces (the
// padding Parse trims), up to n bytes.
func genText(n int) *rapid.Generator[string] {
	return rapid.Custom(func(t *rapid.T) string {
		b := rapid.SliceOfN(rapid.ByteRange('!', '~'), 0, n).Draw(t, "text")
		if len(b) > 1 {
			for i := 1; i < len(b)-1; i++ {
				if rapid.Bool().Draw(t, "space") {
					b[i] = ' '
				}
			}
		}
		return string(b)
	})
}

func genCommand(t *rapid.T) Command {
	u32 := rapid.Uint32()
	return Command{
		Opcode: Opcode(rapid.Uint8().Draw(t, "opc")), Flags: rapid.Uint8().Draw(t, "flags"),
		CID: rapid.Uint16().Draw(t, "cid"), NSID: u32.Draw(t, "nsid"), CDW2: u32.Draw(t, "cdw2"),
		CDW3: u32.Draw(t, "cdw3"), MPTR: rapid.Uint64().Draw(t, "mptr"),
		SGL:   SGL{Addr: rapid.Uint64().Draw(t, "addr"), Length: u32.Draw(t, "len"), Type: SGLType(rapid.Uint8().Draw(t, "type"))},
		CDW10: u32.Draw(t, "10"), CDW11: u32.Draw(t, "11"), CDW12: u32.Draw(t, "12"),
		CDW13: u32.Draw(t, "13"), CDW14: u32.Draw(t, "14"), CDW15: u32.Draw(t, "15"),
	}
}

func TestRapidCommandCompletion(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := genCommand(t)
		var b [CommandSize]byte
		c.Put(&b)
		var c2 Command
		c2.Parse(&b)
		if c2 != c {
			t.Fatalf("Command %+v -> %+v", c, c2)
		}
		k := Connect{RecFmt: rapid.Uint16().Draw(t, "recfmt"), QID: rapid.Uint16().Draw(t, "qid"),
			SQSize: rapid.Uint16().Draw(t, "sqsize"), CATTR: rapid.Uint8().Draw(t, "cattr"), KATO: rapid.Uint32().Draw(t, "kato")}
		k.Encode(&c)
		if ConnectOf(&c) != k || c.FabricsType() != FabricsConnect {
			t.Fatalf("Connect %+v -> %+v", k, ConnectOf(&c))
		}
		p := Property{Set: rapid.Bool().Draw(t, "set"), Size8: rapid.Bool().Draw(t, "size8"), Offset: rapid.Uint32().Draw(t, "ofst")}
		if p.Set {
			p.Value = rapid.Uint64().Draw(t, "value")
		}
		p.Encode(&c)
		if PropertyOf(&c) != p {
			t.Fatalf("Property %+v -> %+v", p, PropertyOf(&c))
		}
		g := GetLogPage{LID: rapid.Uint8().Draw(t, "lid"), LSP: rapid.Uint8Range(0, 127).Draw(t, "lsp"),
			RAE: rapid.Bool().Draw(t, "rae"), Length: 4 * (uint64(rapid.Uint32().Draw(t, "numd")) + 1), Offset: rapid.Uint64().Draw(t, "lpo")}
		g.Encode(&c)
		if LogPageOf(&c) != g {
			t.Fatalf("GetLogPage %+v -> %+v", g, LogPageOf(&c))
		}
		lba, n := rapid.Uint64().Draw(t, "lba"), rapid.Uint32Range(1, 65536).Draw(t, "blocks")
		c.SetRange(lba, n)
		if c.LBA() != lba || c.Blocks() != n {
			t.Fatalf("SetRange(%d, %d) -> %d, %d", lba, n, c.LBA(), c.Blocks())
		}

		cpl := Completion{Result: rapid.Uint64().Draw(t, "result"), SQHead: rapid.Uint16().Draw(t, "sqhd"),
			SQID: rapid.Uint16().Draw(t, "sqid"), CID: rapid.Uint16().Draw(t, "ccid"), Status: Status(rapid.Uint16Range(0, 0x7FFF).Draw(t, "status"))}
		var cb [CompletionSize]byte
		cpl.Put(&cb)
		var cpl2 Completion
		cpl2.Parse(&cb)
		if cpl2 != cpl {
			t.Fatalf("Completion %+v -> %+v", cpl, cpl2)
		}
	})
}

func TestRapidIdentify(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		u8, u16, u32 := rapid.Uint8(), rapid.Uint16(), rapid.Uint32()
		id := IdentifyController{
			VendorID: u16.Draw(t, "vid"), Serial: genText(20).Draw(t, "sn"), Model: genText(40).Draw(t, "mn"),
			Firmware: genText(8).Draw(t, "fr"), MDTS: u8.Draw(t, "mdts"), ControllerID: u16.Draw(t, "cntlid"),
			Version: u32.Draw(t, "ver"), OAES: u32.Draw(t, "oaes"), CTRATT: u32.Draw(t, "ctratt"),
			ControllerType: u8.Draw(t, "type"), AERL: u8.Draw(t, "aerl"), FRMW: u8.Draw(t, "frmw"),
			LPA: u8.Draw(t, "lpa"), ELPE: u8.Draw(t, "elpe"), KAS: u16.Draw(t, "kas"), SQES: u8.Draw(t, "sqes"),
			CQES: u8.Draw(t, "cqes"), MaxCmd: u16.Draw(t, "maxcmd"), NN: u32.Draw(t, "nn"), ONCS: u16.Draw(t, "oncs"),
			VWC: u8.Draw(t, "vwc"), AWUPF: u16.Draw(t, "awupf"), SGLS: u32.Draw(t, "sgls"), SubNQN: genText(255).Draw(t, "subnqn"),
			IOCCSZ: u32.Draw(t, "ioccsz"), IORCSZ: u32.Draw(t, "iorcsz"), ICDOFF: u16.Draw(t, "icdoff"),
			FCATT: u8.Draw(t, "fcatt"), MSDBD: u8.Draw(t, "msdbd"),
		}
		var b [IdentifySize]byte
		id.Put(&b)
		var id2 IdentifyController
		id2.Parse(&b)
		if diff := cmp.Diff(id, id2); diff != "" {
			t.Fatalf("IdentifyController (-want +got):\n%s", diff)
		}
		ns := IdentifyNamespace{Size: rapid.Uint64().Draw(t, "nsze"), Capacity: rapid.Uint64().Draw(t, "ncap"),
			Utilization: rapid.Uint64().Draw(t, "nuse"), Features: u8.Draw(t, "nsfeat"), NLBAF: u8.Draw(t, "nlbaf"),
			FLBAS: u8.Draw(t, "flbas"), NMIC: u8.Draw(t, "nmic"), DLFEAT: u8.Draw(t, "dlfeat"), Attributes: u8.Draw(t, "nsattr")}
		copy(ns.NGUID[:], rapid.SliceOfN(rapid.Byte(), 16, 16).Draw(t, "nguid"))
		copy(ns.EUI64[:], rapid.SliceOfN(rapid.Byte(), 8, 8).Draw(t, "eui"))
		for i := range ns.LBAF {
			ns.LBAF[i] = LBAFormat{MetadataSize: u16.Draw(t, "ms"), LBADS: u8.Draw(t, "lbads"), RP: rapid.Uint8Range(0, 3).Draw(t, "rp")}
		}
		ns.Put(&b)
		var ns2 IdentifyNamespace
		ns2.Parse(&b)
		if ns2 != ns {
			t.Fatalf("IdentifyNamespace %+v -> %+v", ns, ns2)
		}
		ids := rapid.SliceOfN(rapid.Uint32Range(1, 1<<32-1), 0, 1024).Draw(t, "ids")
		PutNamespaceList(&b, ids)
		if got := ParseNamespaceList(&b, nil); !cmp.Equal(got, ids, cmp.Comparer(func(a, b []uint32) bool { return len(a) == len(b) && (len(a) == 0 || cmp.Equal(a, b)) })) {
			t.Fatalf("namespace list %v -> %v", ids, got)
		}
		var ds []NamespaceDescriptor
		for range rapid.IntRange(0, 8).Draw(t, "nds") {
			ds = append(ds, NamespaceDescriptor{Type: u8.Draw(t, "nidt"), Value: rapid.SliceOfN(rapid.Byte(), 1, 255).Draw(t, "v")})
		}
		PutNamespaceDescriptors(&b, ds)
		if got := ParseNamespaceDescriptors(&b); !cmp.Equal(got, ds, cmp.Comparer(func(a, b []NamespaceDescriptor) bool { return len(a) == 0 && len(b) == 0 || cmp.Equal(a, b) })) {
			t.Fatalf("descriptors %v -> %v", ds, got)
		}
	})
}

func TestRapidLogs(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		u8, u16, u64 := rapid.Uint8(), rapid.Uint16(), rapid.Uint64()
		e := DiscoveryLogEntry{TrType: u8.Draw(t, "trtype"), AdrFam: u8.Draw(t, "adrfam"), Subtype: u8.Draw(t, "subtype"),
			TReq: u8.Draw(t, "treq"), PortID: u16.Draw(t, "portid"), ControllerID: u16.Draw(t, "cntlid"),
			ASQSZ: u16.Draw(t, "asqsz"), EFlags: u16.Draw(t, "eflags"), TrSvcID: genText(31).Draw(t, "svc"),
			SubNQN: genText(255).Draw(t, "nqn"), TrAddr: genText(255).Draw(t, "addr"), SecType: u8.Draw(t, "sectype")}
		var b [DiscoveryLogPageSize]byte
		e.Put(&b)
		var e2 DiscoveryLogEntry
		e2.Parse(&b)
		if e2 != e {
			t.Fatalf("DiscoveryLogEntry %+v -> %+v", e, e2)
		}
		h := DiscoveryLogHeader{GenCtr: u64.Draw(t, "gen"), NumRec: u64.Draw(t, "numrec"), RecFmt: u16.Draw(t, "recfmt")}
		h.Put(&b)
		var h2 DiscoveryLogHeader
		h2.Parse(&b)
		if h2 != h {
			t.Fatalf("DiscoveryLogHeader %+v -> %+v", h, h2)
		}
		s := SMARTLog{CriticalWarning: u8.Draw(t, "cw"), Temperature: u16.Draw(t, "temp"), AvailableSpare: u8.Draw(t, "spare"),
			SpareThreshold: u8.Draw(t, "thr"), PercentUsed: u8.Draw(t, "used"), DataUnitsRead: u64.Draw(t, "dur"),
			DataUnitsWritten: u64.Draw(t, "duw"), HostReads: u64.Draw(t, "hr"), HostWrites: u64.Draw(t, "hw"),
			PowerCycles: u64.Draw(t, "pc"), PowerOnHours: u64.Draw(t, "poh"), UnsafeShutdowns: u64.Draw(t, "us"),
			MediaErrors: u64.Draw(t, "me"), ErrorLogEntries: u64.Draw(t, "ele")}
		var sb [SMARTLogSize]byte
		s.Put(&sb)
		var s2 SMARTLog
		s2.Parse(&sb)
		if s2 != s {
			t.Fatalf("SMARTLog %+v -> %+v", s, s2)
		}
		el := ErrorLogEntry{Count: u64.Draw(t, "count"), SQID: u16.Draw(t, "sqid"), CID: u16.Draw(t, "cid"),
			Status: Status(rapid.Uint16Range(0, 0x7FFF).Draw(t, "st")), Location: u16.Draw(t, "loc"), LBA: u64.Draw(t, "lba"),
			NSID: rapid.Uint32().Draw(t, "nsid"), TrType: u8.Draw(t, "tr")}
		var eb [ErrorLogEntrySize]byte
		el.Put(&eb)
		var el2 ErrorLogEntry
		el2.Parse(&eb)
		if el2 != el {
			t.Fatalf("ErrorLogEntry %+v -> %+v", el, el2)
		}
		d := ConnectData{ControllerID: u16.Draw(t, "cntlid2"), SubNQN: genText(255).Draw(t, "sub"), HostNQN: genText(255).Draw(t, "host")}
		copy(d.HostID[:], rapid.SliceOfN(rapid.Byte(), 16, 16).Draw(t, "hostid"))
		var db [ConnectDataSize]byte
		d.Put(&db)
		var d2 ConnectData
		d2.Parse(&db)
		if d2 != d {
			t.Fatalf("ConnectData %+v -> %+v", d, d2)
		}
		r := DSMRange{Attributes: rapid.Uint32().Draw(t, "attr"), Blocks: rapid.Uint32().Draw(t, "nlb"), LBA: u64.Draw(t, "slba")}
		var rb [DSMRangeSize]byte
		r.Put(&rb)
		var r2 DSMRange
		r2.Parse(&rb)
		if r2 != r {
			t.Fatalf("DSMRange %+v -> %+v", r, r2)
		}
	})
}
