package blog

import (
	"context"
	"errors"
	"fmt"

	"github.com/nemocache/nemo/adapters"
)

// Truncate deletes the entries below seq below (a checkpoint flushed
// everything they hold). Entries go whole, oldest first, in atomic calls
// that also rewrite the fence unchanged, conditioned on the version this
// Log last wrote: so a Log fenced by a later Open deletes nothing (the new
// owner reads the log whole after its fence, never a log losing its head
// under it). A call refused or unanswered is settled by reading the fence
// (ours: its version adopted; another Open's: a *FencedError) and then the
// entries it named, deleting again what is left. below may be at most
// Last()+1; ctx is checked between calls, each bounded by
// Options.CallTimeout.
func (l *Log) Truncate(ctx context.Context, below uint64) error {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if err := l.Err(); err != nil {
		return err
	}
	if below > l.fence.Last+1 {
		return fmt.Errorf("blog: truncate the log of %q below %d: its last entry is %d: %w", l.ks, below, l.fence.Last, adapters.ErrInvalid)
	}
	for len(l.present) > 0 && l.present[0].seq < below {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, keys := l.truncation(below)
		if err := l.deleteEntries(keys); err != nil {
			return err
		}
		l.st.truncated.Add(uint64(n))
		l.present = l.present[n:]
	}
	return nil
}

// truncation returns how many of the oldest entries below below one call
// deletes, whole, within the limits, and their keys.
func (l *Log) truncation(below uint64) (int, [][]byte) {
	var keys [][]byte
	bytes, n := l.fenceMax, 0
	for _, h := range l.present {
		if h.seq >= below {
			break
		}
		var ks [][]byte
		size := 0
		for p := range h.parts {
			k := l.o.Codec.EntryKey(l.ks, h.seq, p)
			ks = append(ks, k)
			size += len(k)
		}
		if n > 0 && (1+len(keys)+len(ks) > l.lim.CallRecords || bytes+size > l.lim.CallBytes) {
			break
		}
		keys, bytes, n = append(keys, ks...), bytes+size, n+1
	}
	return n, keys
}

// deleteEntries deletes keys in one atomic call with the fence, until
// none is left.
func (l *Log) deleteEntries(keys [][]byte) error {
	var last error
	for range maxRounds {
		fv, err := l.o.Codec.EncodeFence(l.ks, l.fence)
		if err != nil {
			return fmt.Errorf("blog: encode the fence of %q: %w", l.ks, err)
		}
		ms := make([]adapters.Mutation, 0, 1+len(keys))
		ms = append(ms, adapters.Mutation{Write: adapters.Write{Key: l.fenceKey, Value: fv,
			Expect: adapters.Expect{Kind: adapters.ExpectVersion, Version: l.version}}})
		for _, k := range keys {
			ms = append(ms, adapters.Mutation{Write: adapters.Write{Key: k}, Delete: true})
		}
		vers, err := l.writeAtomic(ms)
		switch {
		case err == nil && len(vers) > 0 && vers[0] != "":
			l.version = vers[0]
			return nil
		case err == nil:
			err = errors.New("the store reported no version for the fence")
		case definite(err):
			return fmt.Errorf("blog: truncate the log of %q: %w", l.ks, err)
		case errors.Is(err, adapters.ErrAborted):
			last = err
			continue
		}
		last = err
		if keys, err = l.settleTruncation(keys, err); err != nil || len(keys) == 0 {
			return err
		}
	}
	return fmt.Errorf("blog: truncate the log of %q: not applied after %d attempts (the last: %v): %w", l.ks, maxRounds, last, adapters.ErrUnavailable)
}

// settleTruncation reads the fence and the keys of a truncation call that
// was refused or unanswered (cause), and returns the keys still there.
func (l *Log) settleTruncation(keys [][]byte, cause error) ([][]byte, error) {
	l.st.settles.Add(1)
	cur, ver, exists, err := l.readFenceRetrying()
	switch {
	case err != nil:
		// Nothing lost: the entries are below a checkpoint, and the next
		// write conditioned on a stale version is settled in turn.
		return nil, fmt.Errorf("blog: truncate the log of %q: %w; reading the fence to settle it: %w", l.ks, cause, err)
	case !exists || cur.Epoch != l.fence.Epoch || cur.Token != l.fence.Token:
		fe := &FencedError{Keyspace: l.ks, Epoch: l.fence.Epoch, Found: cur}
		l.fail(fe)
		return nil, fe
	case cur.Last != l.fence.Last:
		err := fmt.Errorf("%w: the fence of %q says last entry %d; this Log wrote %d", ErrCorrupt, l.ks, cur.Last, l.fence.Last)
		l.fail(err)
		return nil, err
	}
	l.version = ver
	ctx, cancel := l.callCtx()
	defer cancel()
	l.st.storeCalls.Add(1)
	recs, err := l.o.Store.Get(ctx, l.lks, keys)
	if err != nil {
		return nil, fmt.Errorf("blog: truncate the log of %q: %w; reading its entries to settle it: %w", l.ks, cause, err)
	}
	var left [][]byte
	for i, r := range recs {
		if r.Value != nil && i < len(keys) {
			left = append(left, keys[i])
		}
	}
	return left, nil
}
