package fsm

import (
	"fmt"
	"io"
)

// Size is the length in bytes of the copy WriteTo writes.
func (r *Reader) Size() int64 { return r.tx.Size() }

// WriteTo writes a consistent copy of the whole state machine file as this
// view sees it (bbolt's Tx.WriteTo): a valid state machine file that Open
// and Restore accept, holding the applied index of the view. It writes
// exactly Size bytes unless w fails; on error the copy is incomplete and
// must be discarded. Writes applied while it runs are not in the copy, and
// the view's read transaction stays open until it returns, so a slow w
// keeps old pages from being reused (the file may grow meanwhile).
func (r *Reader) WriteTo(w io.Writer) (int64, error) {
	n, err := r.tx.WriteTo(w)
	if err != nil {
		return n, fmt.Errorf("fsm: copy: %w", err)
	}
	return n, nil
}
