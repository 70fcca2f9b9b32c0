package tcp

import (
	"context"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"

	"github.com/nhdkit/nhd/nvme"
)

// burstTarget reads rounds of n CapsuleCmds from nc, however they arrive,
// and answers each round with n CapsuleResps in one Write, so that the
// host's reader completes them all in one go. After a round it sends the
// host's write count on rounds.
func burstTarget(nc net.Conn, n int, rounds chan<- int, writes func() int) {
	var f framing
	cmd := make([]byte, CmdSize)
	out := make([]byte, 0, n*HeaderSize)
	for {
		out = out[:0]
		for range n {
			if _, err := io.ReadFull(nc, cmd); err != nil {
				return
			}
			var c CapsuleCmd
			if c.Parse((*[CmdSize]byte)(cmd)) != nil {
				return
			}
			var hb [HeaderSize]byte
			(&CapsuleResp{Header: f.layout(TypeCapsuleResp, 0), Cpl: nvme.Completion{CID: c.Cmd.CID}}).Put(&hb)
			out = append(out, hb[:]...)
		}
		rounds <- writes()
		if _, err := nc.Write(out); err != nil {
			return
		}
	}
}

// Callers that a burst of completions wakes, and that each start their
// next command at once, send those commands in one writev: each queues
// its command before it yields to the others (nbd's client does the
// same, TestClientQueuedRequestsShareOneWrite). On one processor the
// order the callers run in is nearly fixed: the last one woken runs
// first, then the others in the order they were woken, and the callers
// that yielded after them. Nearly: one schedule in 61 the runtime takes
// a goroutine from the global run queue first (where a yield puts it),
// and a caller that yielded then writes what is queued so far, which
// makes two writes. Before the callers queued their commands ahead of
// the yield, each went out alone.
func TestHostQueuedCommandsShareOneWrite(t *testing.T) {
	const callers = 8
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	nc, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	tc, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	q := pipeQueue(nc, framing{}, callers)
	defer q.close()
	rounds := make(chan int, 4)
	go burstTarget(tc, callers, rounds, func() int {
		q.wmu.Lock()
		defer q.wmu.Unlock()
		return q.wbatches
	})
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range 2 {
				cmd := nvme.Command{Opcode: nvme.OpFlush, NSID: 1}
				if _, err := q.do(context.Background(), &cmd, nil, nil); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	first := <-rounds
	second := <-rounds
	wg.Wait()
	if got := second - first; got > 2 {
		t.Errorf("%d commands started by the callers one burst of completions woke went out in %d writes, want 1 (2 at most)", callers, got)
	}
}
