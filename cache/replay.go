package cache

import (
	"bytes"
	"context"
	"sync"

	"github.com/nemocache/nemo/adapters"
)

// This file is the buffer's side of crash recovery. A commit logs, with
// each write, the base its record had (Bases), and write-back logs what it
// is about to send (SetWriteBackLog); replay installs the logged writes
// again (ApplyReplayed) and takes what was sent (ReplaySent), so that
// write-back after a restart is conditioned on the newest base the buffer
// knew, and knows every write of its own the store may hold.

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
//     writes and logged sends (ReplaySent) over in log order, so a record
//     ends with the newest base the log knows; should a write's base be
//     older than what the store holds (it was read just before a
//     write-back's outcome), the write-back is refused and, the store
//     holding one of the buffer's logged writes, rebased.
//   - A write's Prior, the unwritten value its record held when it
//     committed, is noted as a write the store may hold (keyspace.sent):
//     its write-back may have landed before the crash while the log
//     record saying so is behind a checkpoint.
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
	var priors []SentWrite
	for _, w := range writes {
		if w.Prior != noDigest {
			priors = append(priors, SentWrite{Key: w.Key, Digest: w.Prior})
		}
	}
	if err := s.noteAllSent(ctx, priors); err != nil {
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

// ReplaySent takes, during replay, what a write-back logged it was about
// to send before the crash (SetWriteBackLog). The store may hold each of
// those writes, so each is noted as the buffer's own (keyspace.sent); and
// the base it was conditioned on is the newest the buffer knew for the key
// then, so a buffered record of the key takes it (a record a later
// replayed write creates takes that write's base, logged later).
func (b *Buffer) ReplaySent(ctx context.Context, ks adapters.Keyspace, sent []SentWrite) error {
	s, err := b.space(ks)
	if err != nil {
		return err
	}
	if err := s.noteAllSent(ctx, sent); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range sent {
		if r := s.floor(w.Key); bytes.Equal(r.key(), w.Key) {
			delta := r.setBase(w.Base)
			b.used.Add(delta)
			if r.dirty() {
				b.dirty.Add(delta)
			}
		}
	}
	return nil
}

// noteAllSent notes each of sent as a write the store may hold, taking
// s.wbMu (see noteSent).
func (s *keyspace) noteAllSent(ctx context.Context, sent []SentWrite) error {
	if len(sent) == 0 {
		return nil
	}
	if err := s.wbMu.Lock(ctx); err != nil {
		return err
	}
	defer s.wbMu.Unlock()
	for _, w := range sent {
		s.noteSent(string(w.Key), w.Digest)
	}
	return nil
}

// HoldWriteBack holds every write-back (the flusher's, eviction's,
// Flush's) before it starts until release is called: the engine holds
// them while it replays the log, so that nothing is written back from a
// half-replayed buffer, or sent before the log can record it.
func (b *Buffer) HoldWriteBack() (release func()) {
	ch := make(chan struct{})
	b.hold.Store(&ch)
	var once sync.Once
	return func() {
		once.Do(func() {
			b.hold.Store(nil)
			close(ch)
		})
	}
}

// waitHold waits for a HoldWriteBack to be released, or ctx.
func (b *Buffer) waitHold(ctx context.Context) error {
	h := b.hold.Load()
	if h == nil {
		return nil
	}
	select {
	case <-*h:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
