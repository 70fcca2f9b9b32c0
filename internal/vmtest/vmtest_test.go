package vmtest

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestArchiveGolden pins one member's bytes to the newc layout: magic,
// thirteen hexadecimal fields, the name padded so header+name is a
// multiple of 4, the data padded likewise, then the trailer.
func TestArchiveGolden(t *testing.T) {
	var a Archive
	a.File("a", 0o644, []byte("hi\n"))
	var b bytes.Buffer
	if _, err := a.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	want := "070701" + "00000001" + "000081A4" + "00000000" + "00000000" + "00000001" + "00000000" +
		"00000003" + "00000000" + "00000000" + "00000000" + "00000000" + "00000002" + "00000000" +
		"a\x00" + "hi\n\x00" +
		"070701" + "00000000" + "00000000" + "00000000" + "00000000" + "00000001" + "00000000" +
		"00000000" + "00000000" + "00000000" + "00000000" + "00000000" + "0000000B" + "00000000" +
		"TRAILER!!!\x00" + "\x00\x00\x00"
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Fatalf("archive bytes (-want +got):\n%s", diff)
	}
}

type member struct {
	Name         string
	Mode         uint32
	Data         string
	Major, Minor uint32
}

// parseNewc is an independent reader of the format, for the round trip.
func parseNewc(t *testing.T, b []byte) []member {
	var ms []member
	for off := 0; ; {
		if len(b)-off < newcHeader || string(b[off:off+6]) != newcMagic {
			t.Fatalf("bad header at %d", off)
		}
		field := func(i int) uint32 {
			v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
			if err != nil {
				t.Fatal(err)
			}
			return uint32(v)
		}
		size, nameSize := int(field(6)), int(field(11))
		mode, major, minor := field(1), field(9), field(10)
		name := string(b[off+newcHeader : off+newcHeader+nameSize-1])
		off += newcHeader + nameSize
		off += (4 - off%4) % 4
		if name == newcTrailer {
			if off != len(b) {
				t.Fatalf("%d bytes after the trailer", len(b)-off)
			}
			return ms
		}
		ms = append(ms, member{name, mode, string(b[off : off+size]), major, minor})
		off += size
		off += (4 - off%4) % 4
	}
}

func TestArchiveRoundTrip(t *testing.T) {
	var a Archive
	a.File("bin/busybox", 0o755, []byte("12345"))
	a.Symlink("bin/sh", "busybox")
	a.CharDev("dev/console", 0o600, 5, 1)
	a.File("usr/lib/x/libc.so.6", 0o755, bytes.Repeat([]byte{7}, 1001))
	var b bytes.Buffer
	if _, err := a.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	got := parseNewc(t, b.Bytes())
	want := []member{
		{"bin", modeDir | 0o755, "", 0, 0},
		{"bin/busybox", modeFile | 0o755, "12345", 0, 0},
		{"bin/sh", modeLink | 0o777, "busybox", 0, 0},
		{"dev", modeDir | 0o755, "", 0, 0},
		{"dev/console", modeChar | 0o600, "", 5, 1},
		{"usr", modeDir | 0o755, "", 0, 0},
		{"usr/lib", modeDir | 0o755, "", 0, 0},
		{"usr/lib/x", modeDir | 0o755, "", 0, 0},
		{"usr/lib/x/libc.so.6", modeFile | 0o755, strings.Repeat("\x07", 1001), 0, 0},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("members (-want +got):\n%s", diff)
	}
}

func TestLddPaths(t *testing.T) {
	out := "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n"
	want := []string{"/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"}
	if diff := cmp.Diff(want, lddPaths(out)); diff != "" {
		t.Fatal(diff)
	}
}

// TestBoot boots the guest, runs commands and checks what they print.
func TestBoot(t *testing.T) {
	vm := New(t)
	vm.Module("ext4")
	vm.Step("uname", "uname -r").Check = func(t *testing.T, out string) {
		if strings.TrimSpace(out) != vm.Kernel.Release {
			t.Errorf("guest kernel %q, want %q", strings.TrimSpace(out), vm.Kernel.Release)
		}
	}
	vm.Step("modules", "grep -w ext4 /proc/modules || grep -w ext4 /proc/filesystems").Check = func(t *testing.T, out string) {
		if !strings.Contains(out, "ext4") {
			t.Errorf("ext4 not loaded:\n%s", out)
		}
	}
	vm.Step("arith", "echo $((6*7))").Check = func(t *testing.T, out string) {
		if strings.TrimSpace(out) != fmt.Sprint(42) {
			t.Errorf("guest printed %q", out)
		}
	}
	vm.Run()
}

// TestReadConsole feeds the console follower what a guest prints, kernel
// noise included, and checks each step's result.
func TestReadConsole(t *testing.T) {
	vm := &VM{}
	a, b, c := vm.Step("a", ""), vm.Step("b", ""), vm.Step("c", "")
	ended := 0
	a.OnEnd = func() { ended++ }
	console := "[    1.0] random: crng init done\r\n" +
		markStep + "a\r\nout a1\r\nout a2\r\n" + markEnd + "a 0\r\n" +
		markStep + "b\r\n[    2.0] EXT4-fs error\r\n" + markEnd + "b 3\r\n" +
		markDone + "\r\n"
	done := make(chan struct{})
	vm.readConsole(strings.NewReader(console), done)
	<-done
	got := []Step{*a, *b, *c}
	for i := range got {
		got[i].Duration, got[i].OnEnd = 0, nil
	}
	want := []Step{
		{Name: "a", Ran: true, Output: "out a1\nout a2\n"},
		{Name: "b", Ran: true, ExitCode: 3, Output: "[    2.0] EXT4-fs error\n"},
		{Name: "c"},
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(x, y Step) bool {
		return x.Name == y.Name && x.Ran == y.Ran && x.ExitCode == y.ExitCode && x.Output == y.Output
	})); diff != "" {
		t.Fatalf("steps (-want +got):\n%s", diff)
	}
	if ended != 1 {
		t.Errorf("OnEnd of a called %d times", ended)
	}
}
