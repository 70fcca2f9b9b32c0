package vmtest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Kernel is an installed Linux kernel: its image and its module tree.
type Kernel struct {
	Release string // uname -r of the kernel, for example 6.1.0-57-amd64
	Image   string // /boot/vmlinuz-RELEASE
}

// FindKernel returns the newest kernel under /boot whose modules are
// installed under /lib/modules.
func FindKernel() (Kernel, error) {
	images, _ := filepath.Glob("/boot/vmlinuz-*")
	for i := len(images) - 1; i >= 0; i-- {
		rel := strings.TrimPrefix(filepath.Base(images[i]), "vmlinuz-")
		if _, err := os.Stat(filepath.Join("/lib/modules", rel, "modules.dep")); err == nil {
			return Kernel{Release: rel, Image: images[i]}, nil
		}
	}
	return Kernel{}, fmt.Errorf("vmtest: no /boot/vmlinuz-* with modules under /lib/modules (Debian package linux-image-amd64)")
}

// ModuleLoad is one insmod the guest runs: the module's path (the same
// inside the guest as on the host) and its parameters.
type ModuleLoad struct {
	Path   string
	Params string
}

// ModuleDeps lists the insmod steps that load module name and its
// dependencies in order, as modprobe --show-depends prints them. Built-in
// modules give no steps.
func (k Kernel) ModuleDeps(name string) ([]ModuleLoad, error) {
	out, err := exec.Command("modprobe", "-S", k.Release, "--show-depends", name).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("vmtest: modprobe --show-depends %s: %v: %s", name, err, bytes.TrimSpace(out))
	}
	var loads []ModuleLoad
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[0] != "insmod" {
			continue // "builtin NAME"
		}
		loads = append(loads, ModuleLoad{Path: f[1], Params: strings.Join(f[2:], " ")})
	}
	return loads, nil
}

// AddProgram copies the executable at path into the archive at the same
// path, with every shared library ldd lists for it (a static program has
// none). Symbolic links are followed: the guest gets the contents.
func AddProgram(a *Archive, path string) error {
	if err := addHostFile(a, path, 0o755); err != nil {
		return err
	}
	out, err := exec.Command("ldd", path).CombinedOutput()
	if err != nil {
		if bytes.Contains(out, []byte("not a dynamic executable")) {
			return nil
		}
		return fmt.Errorf("vmtest: ldd %s: %v: %s", path, err, bytes.TrimSpace(out))
	}
	for _, lib := range lddPaths(string(out)) {
		if a.Has(lib) {
			continue
		}
		if err := addHostFile(a, lib, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// lddPaths picks the library paths out of ldd's output:
// "\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" and
// "\t/lib64/ld-linux-x86-64.so.2 (0x...)".
func lddPaths(out string) []string {
	var paths []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			paths = append(paths, f[2])
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			paths = append(paths, f[0])
		}
	}
	return paths
}

// AddHostFile copies the host file at path into the archive at the same
// path.
func AddHostFile(a *Archive, path string) error { return addHostFile(a, path, 0o644) }

func addHostFile(a *Archive, path string, perm os.FileMode) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("vmtest: %w", err)
	}
	a.File(path, perm, data)
	return nil
}
