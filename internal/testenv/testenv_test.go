package testenv

import (
	"os/exec"
	"testing"
	"time"
)

func TestNeedFindsShell(t *testing.T) {
	if p := Need(t, "sh", "dash"); p == "" {
		t.Fatal("Need returned an empty path for sh")
	}
}

func TestStartAndKill(t *testing.T) {
	sh := Need(t, "sh", "dash")
	p := Start(t, sh, "-c", "echo ready; sleep 60")
	deadline := time.Now().Add(5 * time.Second)
	for p.Output() != "ready\n" {
		if time.Now().After(deadline) {
			t.Fatalf("output %q", p.Output())
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.Kill()
	select {
	case <-p.Done():
	default:
		t.Fatal("process still running after Kill")
	}
}

func TestRunErrTimeout(t *testing.T) {
	if _, err := exec.LookPath("sleep"); err != nil {
		t.Skip("no sleep")
	}
	if _, err := RunErr(100*time.Millisecond, "sleep", "10"); err == nil {
		t.Fatal("expected a timeout error")
	}
}
