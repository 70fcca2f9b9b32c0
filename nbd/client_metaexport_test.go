package nbd

import (
	"context"
	"errors"
	"testing"
	"time"
)

// proto.md, NBD_OPT_SET_META_CONTEXT: "A client MUST NOT send
// NBD_CMD_BLOCK_STATUS unless ... the final time it was sent, it referred
// to the same export name that was ultimately selected". Contexts set for
// export a and then Go to export b are dropped: BlockStatus fails locally
// (before, the request went out and the server answered EINVAL); Go to a
// keeps them.
func TestNegotiatorMetaContextOtherExport(t *testing.T) {
	s := &Server{Exports: []Export{
		{Name: "a", Backend: NewMemDisk(1 << 20)},
		{Name: "b", Backend: NewMemDisk(1 << 20)},
	}}
	path := serverTestStart(t, s)
	for _, target := range []string{"b", "a"} {
		t.Run(target, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			n, err := DialNegotiator(ctx, "nbd+unix:///a?socket="+path)
			if err != nil {
				t.Fatal(err)
			}
			if err := n.StructuredReplies(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := n.SetMetaContexts(ctx, "a", MetaContextBaseAllocation); err != nil {
				t.Fatal(err)
			}
			c, err := n.Go(ctx, target)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, err = c.BlockStatus(ctx, 0, 4096, nil)
			if target == "a" {
				if err != nil || len(c.MetaContexts()) != 1 {
					t.Errorf("Go to the export the contexts were set for: BlockStatus %v, contexts %v", err, c.MetaContexts())
				}
				return
			}
			if len(c.MetaContexts()) != 0 {
				t.Errorf("MetaContexts after Go(b) with contexts set for a: %v, want none", c.MetaContexts())
			}
			if !errors.Is(err, ErrNotAdvertised) {
				t.Errorf("BlockStatus on b with contexts set for a: %v, want a local ErrNotAdvertised (nothing sent)", err)
			}
		})
	}
}
