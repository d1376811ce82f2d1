package cache

import (
	"time"

	"github.com/nemocache/nemo/adapters"
)

// Conflict is a buffered write the store refused at write-back because the
// key changed since the buffer last saw it (another writer: a second nemo,
// or a client that does not go through nemo). The write had been
// acknowledged, so it is reported in full: an operator can replay it.
type Conflict struct {
	Time     time.Time         `json:"time"`
	Keyspace adapters.Keyspace `json:"keyspace"`
	Key      []byte            `json:"key"`
	// Value is the losing write's value; nil with Delete.
	Value  []byte `json:"value,omitempty"`
	Delete bool   `json:"delete,omitempty"`
	// Expected is what the buffer believed the store held (its base).
	Expected adapters.Expect `json:"expected"`
	// Exists and Current are what the store held when it refused.
	Exists  bool             `json:"exists"`
	Current adapters.Version `json:"current,omitempty"`
	// Resolution is the ConflictPolicy applied: "store" (the buffered
	// write was dropped) or "overwrite" (it was written again).
	Resolution ConflictPolicy `json:"resolution"`
	// Rejected, when set, says the store refused the write as invalid
	// (its own error): not another writer's change, but a record it will
	// never take. The record was dropped (Resolution "store").
	Rejected string `json:"rejected,omitempty"`
}

// resolve deals with a refused write-back of r (exclusive latch held) and
// returns the conflict to report, or false when r must stay as it is for
// now: it changed since the snapshot (its newer write is retried, and
// refused or not on its own) or a transaction holds it (it is dropped once
// released and refused again). A write another writer's change refused
// (c) is resolved by the conflict policy; one the store refused as invalid
// (cause set: it will never take it) is always dropped.
func (b *Buffer) resolve(s *keyspace, r *record, sn snap, c adapters.Conflict, cause error) (Conflict, bool) {
	if r.ver != sn.ver || r.locked() {
		return Conflict{}, false
	}
	out := Conflict{
		Time: time.Now(), Keyspace: s.name, Key: sn.key, Delete: sn.del, Expected: sn.exp,
		Exists: c.Exists, Current: c.Current, Resolution: b.opts.OnConflict,
	}
	if cause != nil {
		out.Resolution, out.Rejected = ConflictStoreWins, cause.Error()
	}
	if !sn.del {
		out.Value = sn.val
	}
	if out.Resolution == ConflictOverwrite {
		// Forget the base: the retry is unconditional.
		delta := r.setBase(adapters.Expect{})
		b.used.Add(delta)
		b.dirty.Add(delta)
		s.dirtyQ = append(s.dirtyQ, dirtyEntry{r: r, at: time.Now().Add(-b.opts.MaxDirtyAge), retry: true})
		return out, true
	}
	// The store wins: drop the record, and with it what the buffer
	// claimed about the gap before it (the store may hold the key now).
	r.setDirty(false)
	b.dirty.Add(-b.size(r))
	pred := s.lower(r.key())
	b.remove(s, r)
	pred.setGap(true)
	return out, true
}

// reportConflict counts and logs a conflict (or a rejected write) and hands
// it to Options.Conflicts; no latch is held.
func (b *Buffer) reportConflict(c Conflict) {
	if c.Rejected != "" {
		b.stats.writebackRejected.Add(1)
		b.opts.Logger.Warn("write-back rejected: the store refuses this write as invalid; it is quarantined in the conflicts file and dropped",
			"keyspace", c.Keyspace, "key", c.Key, "delete", c.Delete, "error", c.Rejected)
		if b.opts.Conflicts != nil {
			b.opts.Conflicts(c)
		}
		return
	}
	b.stats.writebackConflicts.Add(1)
	b.opts.Logger.Warn("write-back conflict: the key changed in the store since nemo last saw it",
		"keyspace", c.Keyspace, "key", c.Key, "delete", c.Delete, "expected", c.Expected,
		"exists", c.Exists, "current", c.Current, "resolution", c.Resolution)
	if b.opts.Conflicts != nil {
		b.opts.Conflicts(c)
	}
}
