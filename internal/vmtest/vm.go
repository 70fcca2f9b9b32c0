package vmtest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nhdkit/nhd/internal/testenv"
)

// Console markers the guest's /init prints around each step.
const (
	markStep = "@@vmtest step "
	markEnd  = "@@vmtest end "
	markDone = "@@vmtest done"
)

// Step is one guest shell script, run by /init with sh -e in the order the
// steps were added, reported on the host as a subtest of the same name.
// After Run, Ran, ExitCode, Output and Duration describe what happened.
type Step struct {
	Name   string
	Script string
	// OnEnd, if set, is called on the console reader's goroutine the
	// moment the guest reports the step's end (before later steps have
	// done much), for snapshotting host-side state such as a backend's
	// counters.
	OnEnd func()
	// Check, if set, runs inside the step's subtest after a successful
	// step with the step's console output.
	Check func(t *testing.T, output string)

	Ran      bool
	ExitCode int
	Output   string
	Duration time.Duration

	start time.Time
	out   strings.Builder
}

// VM is one QEMU guest booted from the installed kernel with an initramfs
// built by the test: static busybox, the modules and programs the test
// asks for, and an /init that runs the steps and powers off.
//
// Build it with New, the adders and Step, then call Run once. A VM is not
// safe for concurrent use.
type VM struct {
	t       *testing.T
	Kernel  Kernel
	QEMUBin string
	// Memory in MiB (default 1024), Timeout for the whole boot and every
	// step (default 6 minutes). The guest has one CPU, emulated by TCG.
	Memory  int
	Timeout time.Duration

	arch    Archive
	modules []ModuleLoad
	loaded  map[string]bool
	setup   []string
	args    []string
	wrap    []string
	steps   []*Step
	console lineLog
}

// New checks for QEMU, busybox-static and the kernel and returns an empty
// VM. A missing piece skips the test naming the Debian package, or fails
// it when CI is set.
func New(t *testing.T) *VM {
	t.Helper()
	qemu := testenv.Need(t, "qemu-system-x86_64", "qemu-system-x86")
	testenv.Need(t, "modprobe", "kmod")
	busybox := testenv.Need(t, "busybox", "busybox-static")
	k, err := FindKernel()
	if err != nil {
		testenv.Unavailable(t, "%v", err)
	}
	vm := &VM{t: t, Kernel: k, QEMUBin: qemu, Memory: 1024, Timeout: 6 * time.Minute, loaded: map[string]bool{}}
	data, err := os.ReadFile(busybox)
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := exec.Command("ldd", busybox).CombinedOutput(); !bytes.Contains(out, []byte("not a dynamic")) {
		testenv.Unavailable(t, "%s is not static: install the Debian package busybox-static", busybox)
	}
	vm.arch.File("bin/busybox", 0o755, data)
	vm.arch.CharDev("dev/console", 0o600, 5, 1)
	for _, d := range []string{"proc", "sys", "dev", "tmp", "mnt", "run", "etc"} {
		vm.arch.Dir(d, 0o755)
	}
	return vm
}

// Module makes /init load kernel module name, after its dependencies;
// params replace the parameters modprobe would pass to name itself.
func (vm *VM) Module(name string, params ...string) {
	vm.t.Helper()
	loads, err := vm.Kernel.ModuleDeps(name)
	if err != nil {
		vm.t.Fatal(err)
	}
	for i, l := range loads {
		if i == len(loads)-1 && len(params) > 0 {
			l.Params = strings.Join(params, " ")
		}
		if vm.loaded[l.Path] {
			continue
		}
		vm.loaded[l.Path] = true
		if err := AddHostFile(&vm.arch, l.Path); err != nil {
			vm.t.Fatal(err)
		}
		vm.modules = append(vm.modules, l)
	}
}

// Program copies programs (absolute host paths) and their libraries into
// the guest at the same paths. Call them by absolute path in steps: the
// static busybox shell runs its own applet of the same name (mke2fs,
// nbd-client ...) before looking at PATH.
func (vm *VM) Program(paths ...string) {
	vm.t.Helper()
	for _, p := range paths {
		if err := AddProgram(&vm.arch, p); err != nil {
			vm.t.Fatal(err)
		}
	}
}

// HostFile copies host files into the guest at the same paths.
func (vm *VM) HostFile(paths ...string) {
	vm.t.Helper()
	for _, p := range paths {
		if err := AddHostFile(&vm.arch, p); err != nil {
			vm.t.Fatal(err)
		}
	}
}

// File puts data into the guest at name.
func (vm *VM) File(name string, perm os.FileMode, data []byte) { vm.arch.File(name, perm, data) }

// Setup adds shell lines /init runs after loading the modules, before
// the first step; a failure there shows in the first step's subtest.
func (vm *VM) Setup(lines ...string) { vm.setup = append(vm.setup, lines...) }

// QEMU adds arguments to the QEMU command line (devices, drives, netdevs).
func (vm *VM) QEMU(args ...string) { vm.args = append(vm.args, args...) }

// Wrap runs QEMU under a command prefix, for example ip netns exec NS to
// put it in a network namespace the test made. The prefix must exec QEMU
// in the same process (process-group kill then stops QEMU too).
func (vm *VM) Wrap(prefix ...string) { vm.wrap = prefix }

// UserNet gives the guest an e1000 NIC eth0 on QEMU user networking with
// address 10.0.2.15; 10.0.2.2 in the guest is the host's 127.0.0.1.
// Tests must reach no other address.
func (vm *VM) UserNet() {
	vm.Module("e1000")
	vm.QEMU("-netdev", "user,id=user0", "-device", "e1000,netdev=user0")
	vm.Setup("ip link set lo up", "ip link set eth0 up",
		"ip addr add 10.0.2.15/24 dev eth0")
}

// Step adds a guest step: script runs under sh -e with its output on the
// console. Steps run in order; after a failing step the guest powers off
// and the remaining steps fail as not run.
func (vm *VM) Step(name, script string) *Step {
	s := &Step{Name: name, Script: script}
	vm.steps = append(vm.steps, s)
	return s
}

// Console returns everything the guest printed so far.
func (vm *VM) Console() string { return vm.console.String() }

// Run builds the initramfs, boots the guest, waits for it to finish every
// step (or for the timeout), stops QEMU by its process group, and reports
// each step as a subtest of the calling test.
func (vm *VM) Run() {
	t := vm.t
	t.Helper()
	dir := t.TempDir()
	initrd := filepath.Join(dir, "initrd.cpio")
	if err := vm.writeInitramfs(initrd); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	err := vm.boot(initrd)
	t.Logf("guest ran %v (%d steps)", time.Since(begin).Round(time.Millisecond), len(vm.steps))
	for _, s := range vm.steps {
		t.Run(s.Name, s.report)
	}
	if err != nil {
		t.Errorf("%v\nconsole:\n%s", err, vm.Console())
	}
}

func (s *Step) report(t *testing.T) {
	if !s.Ran {
		t.Fatal("not run: the guest stopped before this step")
	}
	if s.ExitCode != 0 {
		t.Fatalf("guest step exited %d after %v:\n%s", s.ExitCode, s.Duration, s.Output)
	}
	t.Logf("guest step took %v:\n%s", s.Duration.Round(time.Millisecond), s.Output)
	if s.Check != nil {
		s.Check(t, s.Output)
	}
}

func (vm *VM) writeInitramfs(path string) error {
	vm.arch.File("init", 0o755, []byte(vm.initScript()))
	for i, s := range vm.steps {
		vm.arch.File(fmt.Sprintf("steps/%d.sh", i), 0o755, []byte(s.Script))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := vm.arch.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (vm *VM) initScript() string {
	var b strings.Builder
	b.WriteString(`#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/ TERM=dumb
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
`)
	for _, m := range vm.modules {
		fmt.Fprintf(&b, "insmod %s %s || echo \"insmod %s failed\"\n", m.Path, m.Params, filepath.Base(m.Path))
	}
	for _, l := range vm.setup {
		b.WriteString(l + "\n")
	}
	for i, s := range vm.steps {
		fmt.Fprintf(&b, "echo '%s%s'\nsh -e /steps/%d.sh </dev/null 2>&1\nrc=$?\necho \"%s%s $rc\"\n",
			markStep, s.Name, i, markEnd, s.Name)
		fmt.Fprintf(&b, "if [ $rc != 0 ]; then echo '%s'; poweroff -f; fi\n", markDone)
	}
	fmt.Fprintf(&b, "echo '%s'\nsync\npoweroff -f\n", markDone)
	return b.String()
}

// boot runs QEMU until the guest prints the done marker, exits or times
// out, then kills QEMU's process group.
func (vm *VM) boot(initrd string) error {
	args := []string{"-accel", "tcg", "-cpu", "max", "-smp", "1", "-m", strconv.Itoa(vm.Memory),
		"-nodefaults", "-display", "none", "-serial", "stdio", "-no-reboot",
		"-kernel", vm.Kernel.Image, "-initrd", initrd,
		"-append", "console=ttyS0 quiet panic=-1"}
	args = append(args, vm.args...)
	argv := append(append(vm.wrap[:len(vm.wrap):len(vm.wrap)], vm.QEMUBin), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("vmtest: start %s: %w", vm.QEMUBin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); pw.Close() }()
	done := make(chan struct{})
	go vm.readConsole(pr, done)
	stop := func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	defer stop()
	timer := time.NewTimer(vm.Timeout)
	defer timer.Stop()
	select {
	case <-done:
		stop()
		<-exited
		return nil
	case err := <-exited:
		<-done // the console reader has seen everything
		if vm.allRan() {
			return nil
		}
		return fmt.Errorf("vmtest: qemu exited before the guest finished: %v", err)
	case <-timer.C:
		stop()
		<-exited
		return fmt.Errorf("vmtest: guest did not finish within %v", vm.Timeout)
	}
}

func (vm *VM) allRan() bool {
	for _, s := range vm.steps {
		if !s.Ran {
			return false
		}
	}
	return true
}

// readConsole copies the console into the log and follows the markers;
// it closes done at the done marker or at the end of the output.
func (vm *VM) readConsole(r io.Reader, done chan struct{}) {
	var once sync.Once
	finish := func() { once.Do(func() { close(done) }) }
	defer finish()
	var cur *Step
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		vm.console.add(line)
		now := time.Now()
		switch {
		case strings.Contains(line, markStep):
			name := line[strings.Index(line, markStep)+len(markStep):]
			cur = vm.find(name)
			if cur != nil {
				cur.start = now
			}
		case strings.Contains(line, markEnd) && cur != nil:
			f := strings.Fields(line[strings.Index(line, markEnd)+len(markEnd):])
			cur.Ran, cur.ExitCode = true, -1
			if len(f) > 0 {
				cur.ExitCode, _ = strconv.Atoi(f[len(f)-1])
			}
			cur.Duration, cur.Output = now.Sub(cur.start), cur.out.String()
			if cur.OnEnd != nil {
				cur.OnEnd()
			}
			cur = nil
		case strings.Contains(line, markDone):
			finish()
		case cur != nil:
			cur.out.WriteString(line + "\n")
		}
	}
}

func (vm *VM) find(name string) *Step {
	for _, s := range vm.steps {
		if s.Name == name && !s.Ran {
			return s
		}
	}
	return nil
}

type lineLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lineLog) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.WriteString(line + "\n")
}

func (l *lineLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
