package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Build compiles the command in package directory pkg (relative to the
// test's own directory) into a temporary directory, without cgo (so without
// the race detector, whatever the test's build), and returns the binary's
// path. It uses the go command first on PATH, which go test puts there from
// the toolchain that runs the test.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH (go test puts its own there): %v", err)
	}
	dir, err := filepath.Abs(pkg)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), filepath.Base(dir))
	cmd := exec.Command(goTool, "build", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}
