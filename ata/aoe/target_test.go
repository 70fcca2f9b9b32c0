package aoe

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nhdkit/nhd/ata"
)

const testSectors = 2048

type memBackend struct {
	mu   sync.Mutex
	data []byte
}

func (m *memBackend) ReadAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return copy(p, m.data[off:]), nil
}

func (m *memBackend) WriteAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return copy(m.data[off:], p), nil
}

// pipe is an in-memory Transport: the test writes frames in and reads the
// target's frames out.
type pipe struct {
	in, out chan []byte
	done    chan struct{}
	once    sync.Once
	mtu     int
}

func newPipe(mtu int) *pipe {
	return &pipe{in: make(chan []byte, 64), out: make(chan []byte, 256), done: make(chan struct{}), mtu: mtu}
}

func (p *pipe) ReadFrame(b []byte) (int, error) {
	select {
	case f := <-p.in:
		return copy(b, f), nil
	case <-p.done:
		return 0, errors.New("pipe closed")
	}
}

func (p *pipe) WriteFrame(b []byte) error {
	p.out <- bytes.Clone(b)
	return nil
}

func (p *pipe) MAC() MAC     { return targetMAC }
func (p *pipe) MTU() int     { return p.mtu }
func (p *pipe) Close() error { p.once.Do(func() { close(p.done) }); return nil }

func testInfo() ata.DeviceInfo {
	return ata.DeviceInfo{Model: "NHD AoE Test", Serial: "AOE-1", Firmware: "T1", Sectors: testSectors, WriteCache: true}
}

type rig struct {
	t    *testing.T
	p    *pipe
	disk *Disk
	mem  *memBackend
	tag  uint32
}

// startRig serves e0.1 with two ATA devices on a memory backend, and
// consumes the startup announcement.
func startRig(t *testing.T) *rig { return startRigHosts(t, 2) }

// startRigHosts is startRig with n ATA devices: with one, the target runs
// ATA commands on its reading goroutine; with more, on workers.
func startRigHosts(t *testing.T, n int) *rig {
	mem := &memBackend{data: make([]byte, testSectors*512)}
	r := startRigOn(t, mem, n)
	r.mem = mem
	return r
}

// startRigOn is startRigHosts on backend be.
func startRigOn(t *testing.T, be ata.Backend, n int) *rig {
	d, err := NewDisk(0, 1, testInfo(), be, n)
	if err != nil {
		t.Fatal(err)
	}
	d.Config = []byte("cfg")
	r := &rig{t: t, p: newPipe(1500), disk: d}
	tg := &Target{Transport: r.p, Disks: []*Disk{d}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tg.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	a := r.recv()
	var h Header
	var c ConfigArg
	if ParseHeader(a, &h) != nil || ParseConfigArg(a, &c) != nil || h.Dst != BroadcastMAC || h.Tag != 0 ||
		!h.Flags.Has(FlagResponse) || c.BufferCount != DefaultBufferCount || c.SectorCount != 2 || string(c.String) != "cfg" {
		t.Fatalf("announcement %x", a)
	}
	return r
}

func (r *rig) recv() []byte {
	r.t.Helper()
	select {
	case f := <-r.p.out:
		return f
	case <-time.After(5 * time.Second):
		r.t.Fatal("no frame from the target")
		return nil
	}
}

func (r *rig) silent() {
	r.t.Helper()
	select {
	case f := <-r.p.out:
		r.t.Fatalf("unexpected frame %x", f)
	case <-time.After(100 * time.Millisecond):
	}
}

// send sends a request from src with the given command and argument and
// returns its tag.
func (r *rig) send(src MAC, cmd Command, arg []byte) uint32 {
	r.tag++
	h := Header{Dst: targetMAC, Src: src, Version: Version, Major: 0, Minor: 1, Command: cmd, Tag: r.tag}
	b := make([]byte, HeaderSize)
	h.Put(b)
	b = append(b, arg...)
	r.p.in <- b
	return r.tag
}

// reply receives a reply and checks its addressing and tag.
func (r *rig) reply(to MAC, tag uint32) (Header, []byte) {
	r.t.Helper()
	f := r.recv()
	var h Header
	if err := ParseHeader(f, &h); err != nil {
		r.t.Fatal(err)
	}
	if h.Dst != to || h.Src != targetMAC || h.Tag != tag || !h.Flags.Has(FlagResponse) || h.Major != 0 || h.Minor != 1 || len(f) < MinFrameSize {
		r.t.Fatalf("reply header %+v (len %d), want to %v tag %d", h, len(f), to, tag)
	}
	return h, f
}

func ataReq(flags ATAFlags, op uint8, scnt uint8, lba uint64, data []byte) []byte {
	b := make([]byte, ATADataOffset)
	(&ATAArg{Flags: flags, SectorCount: scnt, CmdStatus: op, LBA: lba}).Put(b)
	return append(b[HeaderSize:], data...)
}

// ata runs one ATA request and returns the reply's argument and data.
func (r *rig) ata(src MAC, flags ATAFlags, op, scnt uint8, lba uint64, data []byte) (ATAArg, []byte) {
	r.t.Helper()
	tag := r.send(src, CmdATA, ataReq(flags, op, scnt, lba, data))
	h, f := r.reply(src, tag)
	if h.Flags.Has(FlagError) {
		r.t.Fatalf("AoE error %v for ATA %#x", h.Error, op)
	}
	var a ATAArg
	if err := ParseATAArg(f, &a); err != nil {
		r.t.Fatal(err)
	}
	return a, f[ATADataOffset:]
}

func TestTargetIdentify(t *testing.T) {
	r := startRig(t)
	a, data := r.ata(initiatorMAC, 0, 0xEC, 1, 0xA0<<24, nil)
	if a.CmdStatus&0xA9 != 0 || len(data) != 512 {
		t.Fatalf("status %#x, %d bytes", a.CmdStatus, len(data))
	}
	id, err := ata.ParseIdentify(data)
	if err != nil {
		t.Fatal(err)
	}
	if id[83]&(1<<10) == 0 || id[86]&(1<<10) == 0 {
		t.Errorf("words 83/86 = %#x/%#x: no LBA48", id[83], id[86])
	}
	if n := uint64(id[100]) | uint64(id[101])<<16 | uint64(id[102])<<32 | uint64(id[103])<<48; n != testSectors {
		t.Errorf("words 100-103 say %d sectors", n)
	}
}

func TestTargetReadWrite(t *testing.T) {
	for _, hosts := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d hosts", hosts), func(t *testing.T) { testReadWrite(t, startRigHosts(t, hosts)) })
	}
}

func testReadWrite(t *testing.T, r *rig) {
	data := make([]byte, 1024)
	for i := range data {
		data[i] = byte(i*13 + 7)
	}
	a, _ := r.ata(initiatorMAC, ATAExtended|ATAWrite, 0x34, 2, 100, data)
	if a.CmdStatus != 0x50 || a.ErrFeature != 0 {
		t.Fatalf("write status %#x error %#x", a.CmdStatus, a.ErrFeature)
	}
	if !bytes.Equal(r.mem.data[100*512:102*512], data) {
		t.Fatal("backend does not hold the written sectors")
	}
	a, got := r.ata(initiatorMAC, ATAExtended, 0x24, 2, 100, nil)
	if a.CmdStatus != 0x50 || !bytes.Equal(got, data) {
		t.Fatalf("read status %#x, data equal %v", a.CmdStatus, bytes.Equal(got, data))
	}
	// 28-bit READ SECTORS with Linux's device byte in lba3.
	a, got = r.ata(initiatorMAC, 0, 0x20, 1, 0xE0<<24|101, nil)
	if a.CmdStatus != 0x50 || !bytes.Equal(got, data[512:]) {
		t.Fatalf("28-bit read status %#x", a.CmdStatus)
	}
}

func TestTargetATAErrors(t *testing.T) {
	r := startRig(t)
	for _, tc := range []struct {
		name      string
		flags     ATAFlags
		op, scnt  uint8
		lba       uint64
		wantError ata.ErrorBits
	}{
		{"past the end", ATAExtended, 0x24, 2, testSectors - 1, ata.ErrorIDNF},
		{"more sectors than a frame", ATAExtended, 0x24, 3, 0, ata.ErrorABRT},
		{"sector count 0", ATAExtended, 0x24, 0, 0, ata.ErrorABRT},
		{"unknown opcode", 0, 0xFF, 0, 0, ata.ErrorABRT},
	} {
		a, _ := r.ata(initiatorMAC, tc.flags, tc.op, tc.scnt, tc.lba, nil)
		if a.CmdStatus&0x01 == 0 || !ata.ErrorBits(a.ErrFeature).Has(tc.wantError) {
			t.Errorf("%s: status %#x error %#x, want ERR and %v", tc.name, a.CmdStatus, a.ErrFeature, tc.wantError)
		}
	}
	// A write without its data is malformed AoE.
	tag := r.send(initiatorMAC, CmdATA, ataReq(ATAExtended|ATAWrite, 0x34, 2, 0, make([]byte, 512)))
	if h, _ := r.reply(initiatorMAC, tag); !h.Flags.Has(FlagError) || h.Error != ErrBadArgument {
		t.Errorf("short write: %+v", h)
	}
}

func configReq(cmd ConfigCmd, s string) []byte {
	b, _ := (&ConfigArg{Cmd: cmd, String: []byte(s)}).Append(nil)
	return b
}

func TestTargetConfig(t *testing.T) {
	r := startRig(t)
	check := func(cmd ConfigCmd, s string, wantReply bool, wantErr Error, wantString string) {
		t.Helper()
		tag := r.send(initiatorMAC, CmdQueryConfig, configReq(cmd, s))
		if !wantReply {
			r.silent()
			return
		}
		h, f := r.reply(initiatorMAC, tag)
		if h.Error != wantErr || h.Flags.Has(FlagError) != (wantErr != 0) {
			t.Fatalf("%v %q: error %v, want %v", cmd, s, h.Error, wantErr)
		}
		if wantErr != 0 {
			return
		}
		var c ConfigArg
		if err := ParseConfigArg(f, &c); err != nil || string(c.String) != wantString || c.Cmd != cmd || c.Version != 1 {
			t.Fatalf("%v %q: reply %+v %v", cmd, s, c, err)
		}
	}
	check(ConfigRead, "", true, 0, "cfg")
	check(ConfigTest, "cf", false, 0, "")
	check(ConfigTest, "cfg", true, 0, "cfg")
	check(ConfigTestPrefix, "cf", true, 0, "cfg")
	check(ConfigTestPrefix, "x", false, 0, "")
	check(ConfigSet, "new", true, ErrConfigStringPresent, "")
	check(ConfigForceSet, "new", true, 0, "new")
	check(ConfigCmd(9), "", true, ErrBadArgument, "")
	check(ConfigRead, "", true, 0, "new")
}

var otherMAC = MAC{0x52, 0x54, 0x00, 0xAA, 0xBB, 0xCC}

func TestTargetMACMask(t *testing.T) {
	r := startRig(t)
	edit, _ := (&MaskArg{Cmd: MaskEdit, Directives: []Directive{{DirAdd, initiatorMAC}}}).Append(nil)
	tag := r.send(otherMAC, CmdMACMask, edit)
	_, f := r.reply(otherMAC, tag)
	var m MaskArg
	if err := ParseMaskArg(f, &m); err != nil || len(m.Directives) != 1 || m.Directives[0].MAC != initiatorMAC {
		t.Fatalf("mask reply %+v %v", m, err)
	}
	r.send(otherMAC, CmdQueryConfig, configReq(ConfigRead, ""))
	r.silent() // not on the list: dropped
	r.ata(initiatorMAC, 0, 0xEC, 1, 0, nil)
	bad, _ := (&MaskArg{Cmd: MaskEdit, Directives: []Directive{{DirDelete, otherMAC}, {DirCmd(7), otherMAC}}}).Append(nil)
	tag = r.send(initiatorMAC, CmdMACMask, bad)
	if _, f := r.reply(initiatorMAC, tag); f[HeaderSize+2] != uint8(MaskErrBadDirective) || f[HeaderSize+3] != 1 {
		t.Fatalf("bad directive reply %x", f[HeaderSize:HeaderSize+4])
	}
}

func TestTargetReserve(t *testing.T) {
	r := startRig(t)
	set := func(src MAC, cmd ReserveCmd, macs ...MAC) Header {
		b, _ := (&ReserveArg{Cmd: cmd, MACs: macs}).Append(nil)
		tag := r.send(src, CmdReserveRelease, b)
		h, _ := r.reply(src, tag)
		return h
	}
	if h := set(initiatorMAC, ReserveSet, initiatorMAC); h.Flags.Has(FlagError) {
		t.Fatalf("set: %v", h.Error)
	}
	tag := r.send(otherMAC, CmdATA, ataReq(ATAExtended, 0x24, 1, 0, nil))
	if h, _ := r.reply(otherMAC, tag); h.Error != ErrTargetReserved {
		t.Fatalf("read from another MAC: %+v", h)
	}
	r.ata(otherMAC, 0, 0xEC, 1, 0, nil) // IDENTIFY stays allowed
	if h := set(otherMAC, ReserveSet, otherMAC); h.Error != ErrTargetReserved {
		t.Fatalf("set by another MAC: %+v", h)
	}
	if h := set(otherMAC, ReserveForceSet); h.Flags.Has(FlagError) {
		t.Fatalf("force release: %v", h.Error)
	}
	r.ata(otherMAC, ATAExtended, 0x24, 1, 0, nil)
}

func TestTargetRefusals(t *testing.T) {
	r := startRig(t)
	tag := r.send(initiatorMAC, Command(9), nil)
	if h, _ := r.reply(initiatorMAC, tag); h.Error != ErrUnrecognizedCommand {
		t.Errorf("unknown command: %+v", h)
	}
	r.send(initiatorMAC, Command(0xF1), nil)
	r.silent()
	b := make([]byte, HeaderSize)
	(&Header{Dst: targetMAC, Src: initiatorMAC, Version: 2, Minor: 1, Command: CmdQueryConfig, Tag: 77}).Put(b)
	r.p.in <- append(b, make([]byte, 8)...)
	if h, _ := r.reply(initiatorMAC, 77); h.Error != ErrUnsupportedVersion {
		t.Errorf("version 2: %+v", h)
	}
	// Another target's reply and another slot are ignored.
	(&Header{Dst: targetMAC, Src: initiatorMAC, Version: 1, Flags: FlagResponse, Minor: 1, Command: CmdQueryConfig}).Put(b)
	r.p.in <- append(bytes.Clone(b), make([]byte, 8)...)
	(&Header{Dst: targetMAC, Src: initiatorMAC, Version: 1, Minor: 2, Command: CmdQueryConfig}).Put(b)
	r.p.in <- append(b, make([]byte, 8)...)
	r.silent()
}

func TestTargetBroadcastQuery(t *testing.T) {
	r := startRig(t)
	b := make([]byte, HeaderSize)
	(&Header{Dst: BroadcastMAC, Src: initiatorMAC, Version: 1, Major: BroadcastMajor, Minor: BroadcastMinor, Command: CmdQueryConfig}).Put(b)
	r.p.in <- append(b, make([]byte, 8)...)
	_, f := r.reply(initiatorMAC, 0)
	if binary.BigEndian.Uint16(f[HeaderSize:]) != DefaultBufferCount {
		t.Errorf("buffer count %x", f[HeaderSize:HeaderSize+2])
	}
}

// batchPipe is a pipe with ReadFrames and WriteFrames; it records the
// size of each WriteFrames.
type batchPipe struct {
	*pipe
	mu     sync.Mutex
	writes []int
}

func (p *batchPipe) ReadFrames(bufs [][]byte, lens []int) (int, error) {
	n, err := p.ReadFrame(bufs[0])
	if err != nil {
		return 0, err
	}
	lens[0] = n
	for i := 1; i < len(bufs); i++ {
		select {
		case f := <-p.in:
			lens[i] = copy(bufs[i], f)
		default:
			return i, nil
		}
	}
	return len(bufs), nil
}

func (p *batchPipe) WriteFrames(frames [][]byte) error {
	p.mu.Lock()
	p.writes = append(p.writes, len(frames))
	p.mu.Unlock()
	for _, f := range frames {
		p.WriteFrame(f)
	}
	return nil
}

// A BatchTransport gets the frames queued before the target reads in one
// ReadFrames, and the replies of a one-host disk in one WriteFrames, in
// order.
func TestTargetBatch(t *testing.T) {
	mem := &memBackend{data: make([]byte, testSectors*512)}
	for i := range mem.data {
		mem.data[i] = byte(i / 512)
	}
	d, err := NewDisk(0, 1, testInfo(), mem, 1)
	if err != nil {
		t.Fatal(err)
	}
	p := &batchPipe{pipe: newPipe(1500)}
	r := &rig{t: t, p: p.pipe, disk: d, mem: mem}
	const n = 5
	for range n {
		r.send(initiatorMAC, CmdATA, ataReq(ATAExtended, 0x24, 1, uint64(r.tag+1), nil))
	}
	tg := &Target{Transport: p, Disks: []*Disk{d}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tg.Serve(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	r.recv() // the announcement
	for tag := uint32(1); tag <= n; tag++ {
		_, f := r.reply(initiatorMAC, tag)
		var a ATAArg
		if ParseATAArg(f, &a); a.CmdStatus != 0x50 || len(f) != ATADataOffset+512 || f[ATADataOffset] != byte(tag) {
			t.Fatalf("tag %d: status %#x, %d bytes, sector byte %d", tag, a.CmdStatus, len(f), f[ATADataOffset])
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.writes) != 1 || p.writes[0] != n {
		t.Errorf("WriteFrames calls of %v frames, want one of %d", p.writes, n)
	}
}
