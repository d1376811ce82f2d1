package cache

import (
	"bytes"
	"context"
	"slices"

	"github.com/nemocache/nemo/adapters"
)

// This file is the buffer's side of crash recovery. A commit logs, with
// each write, the base its record had (Bases), and replay installs the
// logged writes again (ApplyReplayed) so that write-back after a restart
// is conditioned as it would have been without the crash.

// Bases returns, for each key of ks, the base a write of it installed now
// would be written back against: the buffered record's base (see
// baseExpect), ExpectAbsent for a key not buffered inside a sealed gap
// (Apply gives such a record that base), and ExpectAny when nothing is
// known (an open gap, an unknown base, a keyspace that is not open). The
// engine logs it with each write, under the same exclusion against
// checkpoints as the install that follows, so that replay can restore it.
//
// priors[i] is, when the key's record is dirty (its value not yet in the
// store), a hash of that value (0 otherwise): a write-back of it may be in
// flight and land before a crash while the commit that wrote it is
// already behind a checkpoint, so the engine logs the hash too and replay
// counts that value as the buffer's own (ApplyReplayed, Write.Prior).
func (b *Buffer) Bases(ks adapters.Keyspace, keys [][]byte) (bases []adapters.Expect, priors []uint64) {
	bases, priors = make([]adapters.Expect, len(keys)), make([]uint64, len(keys))
	if b.opts.Policy == PolicyNone {
		return bases, priors
	}
	s, err := b.space(ks)
	if err != nil {
		return bases, priors
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for i, key := range keys {
		pred := s.floor(key)
		switch {
		case bytes.Equal(pred.key(), key):
			bases[i] = pred.baseExpect()
			if pred.dirty() {
				priors[i] = b.attemptHash(pred.value(), pred.kind() == Tombstone)
			}
		case b.opts.Policy == PolicyNemo && !pred.gap():
			bases[i] = adapters.Expect{Kind: adapters.ExpectAbsent}
		}
	}
	return bases, priors
}

// ApplyReplayed is Apply for writes replayed from the commit log after a
// restart. It differs in two ways:
//
//   - A record it creates takes the write's Expect as its base (the base
//     the record had when the write committed, see Bases), unless that is
//     ExpectAny (then Apply's rule holds: a write into a sealed gap is
//     based on absence). A record that exists keeps its base, as under
//     Apply: a dirty one its first base, since its write-back has not
//     happened.
//   - Every replayed value of a key is remembered as a write the store may
//     already hold (the keyspace's attempts, see ownWrites): before the
//     crash the buffer may have written any of them back, so a refused
//     write-back that finds one of them in the store is rebased on the
//     store's version and written again, not reported as a conflict. At
//     most maxAttempts values are remembered per key, the latest.
func (b *Buffer) ApplyReplayed(ctx context.Context, ks adapters.Keyspace, writes []Write) error {
	if b.opts.Policy == PolicyNone {
		return b.Apply(ctx, ks, writes)
	}
	if err := b.checkWrites(writes); err != nil {
		return err
	}
	s, err := b.space(ks)
	if err != nil {
		return err
	}
	// The attempts go in first, so that a write-back of a record this
	// call creates (the flusher runs during replay) already knows them.
	if err := s.wbMu.Lock(ctx); err != nil {
		return err
	}
	for _, w := range writes {
		val := w.Value
		if w.Delete {
			val = nil
		}
		s.noteAttempt(string(w.Key), b.attemptHash(val, w.Delete))
		if w.Prior != 0 {
			s.noteAttempt(string(w.Key), w.Prior)
		}
	}
	s.wbMu.Unlock()
	s.mu.Lock()
	for _, w := range writes {
		existed := bytes.Equal(s.floor(w.Key).key(), w.Key)
		b.applyOne(s, w)
		if existed || w.Expect.Kind == adapters.ExpectAny {
			continue
		}
		if r := s.floor(w.Key); bytes.Equal(r.key(), w.Key) && r.dirty() {
			delta := r.setBase(w.Expect)
			b.used.Add(delta)
			b.dirty.Add(delta)
		}
	}
	s.mu.Unlock()
	b.maybeEvict()
	return nil
}

// noteAttempt remembers h as a write of key that the store may hold
// (s.wbMu held): the latest maxAttempts distinct ones per key.
func (s *keyspace) noteAttempt(key string, h uint64) {
	if s.attempts == nil {
		s.attempts = map[string][]uint64{}
	}
	if hs := s.attempts[key]; !slices.Contains(hs, h) {
		hs = append(hs, h)
		if len(hs) > maxAttempts {
			hs = hs[len(hs)-maxAttempts:]
		}
		s.attempts[key] = hs
	}
}
