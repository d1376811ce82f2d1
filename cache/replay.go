package cache

import (
	"bytes"
	"context"

	"github.com/nemocache/nemo/adapters"
)

// This file is the buffer's side of crash recovery. A commit logs, with
// each write, the base its record had (Bases), and the engine logs what
// the store confirmed to each write-back (WriteBack.Store returns it);
// replay installs the logged writes again (ApplyReplayed) and takes the confirmed write-backs
// (ReplayWritten), so that write-back after a restart is conditioned on
// the newest base the log knows, and recognises every value of its own
// the store may hold.

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
				priors[i] = b.digest(pred.value(), pred.kind() == Tombstone)
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
//   - The record takes the write's Expect as its base (the base the record
//     had when the write committed, see Bases), unless that is ExpectAny
//     (then Apply's rule holds: a new record written into a sealed gap is
//     based on absence, an existing one keeps its base). Replay hands
//     writes and confirmed write-backs (ReplayWritten) over in log order,
//     so a record ends with the newest base the log knows.
//   - Each write's value, and its Prior (the unwritten value its record
//     held when it committed), is noted as a write the store may hold
//     (keyspace.sent): before the crash a write-back may have left it
//     there, confirmed or not, its write-back's log record lost or behind
//     a checkpoint. Should the store hold one of them at a version newer
//     than the record's base, the write-back is refused, finds it there,
//     and is rebased, not reported: with one writer, however often nemo
//     crashed, a write-back conflict cannot happen.
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
	own := make([]WrittenBack, 0, len(writes))
	for _, w := range writes {
		own = append(own, WrittenBack{Key: w.Key, Digest: b.digest(w.Value, w.Delete)})
		if w.Prior != noDigest {
			own = append(own, WrittenBack{Key: w.Key, Digest: w.Prior})
		}
	}
	if err := s.noteAllSent(ctx, own); err != nil {
		return err
	}
	s.mu.Lock()
	for _, w := range writes {
		b.applyOne(s, w)
		if w.Expect.Kind == adapters.ExpectAny {
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

// ReplayWritten takes, during replay, what the store confirmed to a
// write-back before the crash (WrittenBack, as the engine logged it): a
// buffered record of the key takes the version the store returned as its
// base, and the value is noted as one the store may hold (a later write
// logged with an older base, read just before the confirmation, brings
// that base back). A key
// with no buffered record needs neither: a later write that creates it
// logged either the confirmed base, or, read before the confirmation, the
// value then being written back as its Prior.
func (b *Buffer) ReplayWritten(ctx context.Context, ks adapters.Keyspace, written []WrittenBack) error {
	s, err := b.space(ks)
	if err != nil {
		return err
	}
	var buffered []WrittenBack
	s.mu.Lock()
	for _, w := range written {
		if r := s.floor(w.Key); bytes.Equal(r.key(), w.Key) {
			delta := r.setBase(w.Base)
			b.used.Add(delta)
			if r.dirty() {
				b.dirty.Add(delta)
			}
			buffered = append(buffered, w)
		}
	}
	s.mu.Unlock()
	return s.noteAllSent(ctx, buffered)
}

// noteAllSent notes each of own as a write the store may hold, taking
// s.wbMu (see noteSent).
func (s *keyspace) noteAllSent(ctx context.Context, own []WrittenBack) error {
	if len(own) == 0 {
		return nil
	}
	if err := s.wbMu.Lock(ctx); err != nil {
		return err
	}
	defer s.wbMu.Unlock()
	for _, w := range own {
		s.noteSent(string(w.Key), w.Digest)
	}
	return nil
}
