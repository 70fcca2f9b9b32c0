package nbd

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// methodRecorder is a Backend with every optional interface but Lender
// and PageTaker that records which of its methods the server calls.
type methodRecorder struct {
	disk *MemDisk
	mu   sync.Mutex
	log  []string
	// zeroErr, if set, is what WriteZeroes returns.
	zeroErr error
}

func (r *methodRecorder) record(s string) {
	r.mu.Lock()
	r.log = append(r.log, s)
	r.mu.Unlock()
}

func (r *methodRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.log
	r.log = nil
	return l
}

func (r *methodRecorder) Size() int64 { return r.disk.Size() }
func (r *methodRecorder) ReadAt(p []byte, off int64) (int, error) {
	r.record("ReadAt")
	return r.disk.ReadAt(p, off)
}
func (r *methodRecorder) WriteAt(p []byte, off int64) (int, error) {
	r.record("WriteAt")
	return r.disk.WriteAt(p, off)
}
func (r *methodRecorder) Flush(ctx context.Context) error { r.record("Flush"); return nil }
func (r *methodRecorder) Trim(ctx context.Context, off, length int64) error {
	r.record("Trim")
	return r.disk.Trim(ctx, off, length)
}
func (r *methodRecorder) WriteZeroes(ctx context.Context, off, length int64, flags CmdFlags) error {
	r.record(fmt.Sprintf("WriteZeroes(%v)", flags))
	if r.zeroErr != nil {
		return r.zeroErr
	}
	return r.disk.WriteZeroes(ctx, off, length, flags)
}
func (r *methodRecorder) BlockStatus(ctx context.Context, off, length int64, dst []Extent) ([]Extent, error) {
	r.record("BlockStatus")
	return r.disk.BlockStatus(ctx, off, length, dst)
}
func (r *methodRecorder) Cache(ctx context.Context, off, length int64) error {
	r.record("Cache")
	return nil
}

type fuaRecorder struct{ *methodRecorder }

func (r fuaRecorder) WriteAtFUA(p []byte, off int64) (int, error) {
	r.record("WriteAtFUA")
	return r.disk.WriteAt(p, off)
}

// TestServerBackendMethods checks the package doc's table of which
// Backend method serves which command and flag, command by command.
func TestServerBackendMethods(t *testing.T) {
	ctx := context.Background()
	rec := &methodRecorder{disk: NewMemDisk(1 << 20)}
	fua := fuaRecorder{&methodRecorder{disk: NewMemDisk(1 << 20)}}
	enotsup := &methodRecorder{disk: NewMemDisk(1 << 20), zeroErr: ENOTSUP}
	noHolesRec := &methodRecorder{disk: NewMemDisk(1 << 20)}
	path := serverTestStart(t, &Server{Exports: []Export{
		{Name: "plain", Backend: rec},
		{Name: "fua", Backend: fua},
		{Name: "enotsup", Backend: enotsup},
		{Name: "noholes", Backend: noHolesRec, NoReadHoles: true},
	}})
	dial := func(name string) *Client {
		c, err := Dial(ctx, serverTestURI(path, name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	plain, withFUA, zeroFails, noHoles := dial("plain"), dial("fua"), dial("enotsup"), dial("noholes")
	buf := make([]byte, 4096)
	for _, tc := range []struct {
		name string
		rec  *methodRecorder
		do   func() error
		want []string
	}{
		{"READ", rec, func() error { _, err := plain.ReadAt(buf, 0); return err }, []string{"BlockStatus", "ReadAt"}},
		{"READ, NoReadHoles", noHolesRec, func() error { _, err := noHoles.ReadAt(buf, 0); return err }, []string{"ReadAt"}},
		{"WRITE", rec, func() error { _, err := plain.WriteAt(buf, 0); return err }, []string{"WriteAt"}},
		{"WRITE+FUA, no FUAWriter", rec, func() error { return plain.Pwrite(ctx, buf, 0, FlagFUA) }, []string{"WriteAt", "Flush"}},
		{"WRITE+FUA, FUAWriter", fua.methodRecorder, func() error { return withFUA.Pwrite(ctx, buf, 0, FlagFUA) }, []string{"WriteAtFUA"}},
		{"FLUSH", rec, func() error { return plain.Flush(ctx) }, []string{"Flush"}},
		{"TRIM+FUA", rec, func() error { return plain.TrimFlags(ctx, 0, 4096, FlagFUA) }, []string{"Trim", "Flush"}},
		{"WRITE_ZEROES+NO_HOLE+FAST_ZERO", rec, func() error { return plain.WriteZeroes(ctx, 0, 4096, FlagNoHole|FlagFastZero) }, []string{"WriteZeroes(NO_HOLE|FAST_ZERO)"}},
		{"WRITE_ZEROES+FUA", rec, func() error { return plain.WriteZeroes(ctx, 0, 4096, FlagFUA) }, []string{"WriteZeroes(0)", "Flush"}},
		{"WRITE_ZEROES, ENOTSUP", enotsup, func() error { return zeroFails.WriteZeroes(ctx, 0, 4096, 0) }, []string{"WriteZeroes(0)", "WriteAt"}},
		{"CACHE", rec, func() error { return plain.Cache(ctx, 0, 4096) }, []string{"Cache"}},
		{"BLOCK_STATUS", rec, func() error { _, err := plain.BlockStatus(ctx, 0, 4096, nil); return err }, []string{"BlockStatus"}},
	} {
		if err := tc.do(); err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if diff := cmp.Diff(tc.want, tc.rec.take()); diff != "" {
			t.Errorf("%s: methods called (-want +got):\n%s", tc.name, diff)
		}
	}
	// FAST_ZERO on a Zeroer that cannot: ENOTSUP, no fallback.
	if err := zeroFails.WriteZeroes(ctx, 0, 4096, FlagFastZero); ErrnoOf(err) != ENOTSUP {
		t.Errorf("FAST_ZERO with an ENOTSUP Zeroer: %v, want ENOTSUP", err)
	}
	if diff := cmp.Diff([]string{"WriteZeroes(FAST_ZERO)"}, enotsup.take()); diff != "" {
		t.Errorf("FAST_ZERO fallback (-want +got):\n%s", diff)
	}
}
