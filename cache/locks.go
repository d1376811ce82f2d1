package cache

import (
	"bytes"
	"slices"
	"sync"
)

// Mode is a lock mode.
type Mode uint8

const (
	ModeS Mode = 1 // shared
	ModeX Mode = 2 // exclusive
)

func (m Mode) String() string {
	if m == ModeX {
		return "X"
	}
	return "S"
}

// Owner is a lock holder: one transaction. It remembers every record it
// holds a lock or pin on, including locks it inherited when a record was
// admitted into a gap it had locked, so Release finds them all. After
// Release an Owner is spent: use a new one for the next transaction.
type Owner struct {
	ID uint64

	mu       sync.Mutex
	held     []held
	released bool // Release has taken held: inheritance must not add to it
}

type held struct {
	s         *keyspace
	r         *record
	inherited bool // handed down by inheritance, not requested by o
}

func (o *Owner) adopt(s *keyspace, r *record) {
	o.mu.Lock()
	o.held = append(o.held, held{s: s, r: r})
	o.mu.Unlock()
}

// Released reports whether Release has run for o: its locks are gone (the
// engine asserts a commit holds them until its release stage).
func (o *Owner) Released() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.released
}

// mark is a position in o's holdings, for takeFrom.
func (o *Owner) mark() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.held)
}

// takeFrom removes and returns the holdings o requested since mark on
// records of s with key >= from. Inherited holdings stay even when they
// arrived after mark: a record admitted meanwhile into a gap o had locked
// before mark carries that older lock, which o still needs (keeping one
// inherited from a lock taken after mark only over-locks). The caller holds
// s's latch, shared at least.
func (o *Owner) takeFrom(mark int, s *keyspace, from []byte) []held {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []held
	keep := o.held[:mark]
	for _, h := range o.held[mark:] {
		if h.s == s && !h.inherited && bytes.Compare(h.r.key(), from) >= 0 {
			out = append(out, h)
		} else {
			keep = append(keep, h)
		}
	}
	o.held = keep
	return out
}

// inherit is adopt for a lock handed down by inheritance. It refuses once
// Release has begun: Release takes the held list first and only then visits
// the records, so a record admitted into one of o's gaps in between would
// otherwise carry a lock of o that nobody ever releases. An owner's own lock
// requests stop before its Release (the transaction serializes them), so
// only inheritance can reach a released owner.
func (o *Owner) inherit(s *keyspace, r *record) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.released {
		return false
	}
	o.held = append(o.held, held{s: s, r: r, inherited: true})
	return true
}

// lockSet is the holders of one lock (a row lock or a next-key lock).
type lockSet struct {
	x *Owner
	s []*Owner
	// upgrading are S holders refused an upgrade to X, waiting for the
	// other S holders to go: until they have it, nobody else is granted
	// S (else a stream of readers would starve them).
	upgrading []uint64
}

func (l *lockSet) empty() bool { return l.x == nil && len(l.s) == 0 && len(l.upgrading) == 0 }

// mode returns the mode o holds, or 0.
func (l *lockSet) mode(o *Owner) Mode {
	if l.x == o {
		return ModeX
	}
	for _, h := range l.s {
		if h == o {
			return ModeS
		}
	}
	return 0
}

// conflicts returns the IDs of the holders that stop o from being granted
// m (none: it can be granted). An S holder refused X is noted as
// upgrading, and then stands in the way of new S requests.
func (l *lockSet) conflicts(o *Owner, m Mode) []uint64 {
	had := l.mode(o)
	if had >= m {
		return nil
	}
	if l.x != nil {
		return []uint64{l.x.ID}
	}
	var in []uint64
	if m == ModeX {
		for _, h := range l.s {
			if h != o {
				in = append(in, h.ID)
			}
		}
		if len(in) > 0 && had == ModeS && !slices.Contains(l.upgrading, o.ID) {
			l.upgrading = append(l.upgrading, o.ID)
		}
		return in
	}
	for _, id := range l.upgrading {
		if id != o.ID {
			in = append(in, id)
		}
	}
	return in
}

// grant gives o mode m (after conflicts said no), upgrading S to X. It
// reports whether o held nothing here before.
func (l *lockSet) grant(o *Owner, m Mode) bool {
	had := l.mode(o)
	if had >= m {
		return false
	}
	if m == ModeX {
		l.dropS(o)
		l.x = o
		l.upgrading = slices.DeleteFunc(l.upgrading, func(id uint64) bool { return id == o.ID })
	} else {
		l.s = append(l.s, o)
	}
	return had == 0
}

func (l *lockSet) dropS(o *Owner) {
	for i, h := range l.s {
		if h == o {
			l.s[i] = l.s[len(l.s)-1]
			l.s = l.s[:len(l.s)-1]
			return
		}
	}
}

func (l *lockSet) release(o *Owner) {
	if l.x == o {
		l.x = nil
	}
	l.dropS(o)
	l.upgrading = slices.DeleteFunc(l.upgrading, func(id uint64) bool { return id == o.ID })
}

// lockState is the lock and pin state of one record. It is allocated only
// for records that have ever been locked.
type lockState struct {
	mu   sync.Mutex
	row  lockSet  // the record's own existence and value
	gap  lockSet  // next-key lock: the gap from this record to its successor
	pins []*Owner // holders that need the record to stay (a range's end anchor)
	dead bool     // detached from its record: lockers must load a fresh one
	// wake, when a refused locker is waiting, is closed (and cleared) the
	// next time a lock here is released or the state is retired.
	wake chan struct{}
}

// waker returns the channel a refused locker waits on (mu held).
func (l *lockState) waker() <-chan struct{} {
	if l.wake == nil {
		l.wake = make(chan struct{})
	}
	return l.wake
}

// wakeAll tells the refused lockers that something was released (mu held).
func (l *lockState) wakeAll() {
	if l.wake != nil {
		close(l.wake)
		l.wake = nil
	}
}

func (l *lockState) free() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.idle()
}

func (l *lockState) idle() bool { return l.row.empty() && l.gap.empty() && len(l.pins) == 0 }

// has reports whether o holds anything here (mu held).
func (l *lockState) has(o *Owner) bool {
	if l.row.mode(o) != 0 || l.gap.mode(o) != 0 {
		return true
	}
	for _, p := range l.pins {
		if p == o {
			return true
		}
	}
	return false
}

// inheritInto gives the new record r, admitted into the gap this lock state
// protects, the same holders in the same modes, for its row and its own gap:
// the gap lock covered r's key and everything after it up to the old
// successor, and now r and r's gap cover exactly that.
func (l *lockState) inheritInto(s *keyspace, r *record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead || l.gap.empty() {
		return
	}
	nl := &lockState{}
	if h := l.gap.x; h != nil && h.inherit(s, r) {
		nl.row.x, nl.gap.x = h, h
	}
	for _, h := range l.gap.s {
		if h.inherit(s, r) {
			nl.row.s = append(nl.row.s, h)
			nl.gap.s = append(nl.gap.s, h)
		}
	}
	if !nl.idle() {
		r.lk.Store(nl)
	}
}
