package cache

import (
	"context"
	"sync"
)

// ctxMutex is a mutex whose Lock gives up when the caller's context ends.
// The buffer holds two locks across store calls (the keyspace gate's run
// lock, a ctxMutex, and a keyspace's write-back lock, a ctxRWMutex); with
// plain mutexes a caller queued behind a hung store call would wait past
// any deadline it has. Its zero value is not usable: make one with
// newCtxMutex.
type ctxMutex struct{ ch chan struct{} }

func newCtxMutex() ctxMutex { return ctxMutex{ch: make(chan struct{}, 1)} }

// Lock takes the mutex, or returns ctx's error if ctx ends first.
func (m ctxMutex) Lock(ctx context.Context) error {
	select {
	case m.ch <- struct{}{}:
		return nil
	default:
	}
	select {
	case m.ch <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m ctxMutex) Unlock() { <-m.ch }

// ctxRWMutex is a reader/writer mutex whose Lock and RLock give up when the
// caller's context ends. It prefers writers: once Lock waits, new readers
// wait behind it, so a steady stream of readers cannot starve a writer.
// Its zero value is not usable: make one with newCtxRWMutex.
type ctxRWMutex struct {
	mu      sync.Mutex
	readers int           // holding it shared
	writer  bool          // held exclusively
	waiting int           // writers waiting
	changed chan struct{} // closed, and replaced, whenever it is let go
}

func newCtxRWMutex() *ctxRWMutex { return &ctxRWMutex{changed: make(chan struct{})} }

// Lock takes the mutex exclusively, or returns ctx's error if ctx ends first.
func (m *ctxRWMutex) Lock(ctx context.Context) error {
	m.mu.Lock()
	m.waiting++
	if err := m.await(ctx, func() bool { return !m.writer && m.readers == 0 }); err != nil {
		m.mu.Lock()
		m.waiting--
		m.wake() // readers held back by this writer may go
		m.mu.Unlock()
		return err
	}
	m.waiting--
	m.writer = true
	m.mu.Unlock()
	return nil
}

// lock takes the mutex exclusively whatever happens: for callers that make
// no store call while waiting and must not fail (a keyspace drop, Check).
func (m *ctxRWMutex) lock() { _ = m.Lock(context.Background()) }

// Unlock lets go of the exclusive hold.
func (m *ctxRWMutex) Unlock() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.writer {
		panic("cache: Unlock of a ctxRWMutex not held exclusively")
	}
	m.writer = false
	m.wake()
}

// RLock takes the mutex shared, or returns ctx's error if ctx ends first.
func (m *ctxRWMutex) RLock(ctx context.Context) error {
	m.mu.Lock()
	if err := m.await(ctx, func() bool { return !m.writer && m.waiting == 0 }); err != nil {
		return err
	}
	m.readers++
	m.mu.Unlock()
	return nil
}

// await waits until ready holds (m.mu held, and still held when it
// returns nil), or returns ctx's error, m.mu let go, if ctx ends first.
func (m *ctxRWMutex) await(ctx context.Context, ready func() bool) error {
	for !ready() {
		ch := m.changed
		m.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		m.mu.Lock()
	}
	return nil
}

// RUnlock lets go of one shared hold.
func (m *ctxRWMutex) RUnlock() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.readers <= 0 {
		panic("cache: RUnlock of a ctxRWMutex not held shared")
	}
	m.readers--
	if m.readers == 0 {
		m.wake()
	}
}

// wake tells every waiter the mutex changed (m.mu held).
func (m *ctxRWMutex) wake() {
	close(m.changed)
	m.changed = make(chan struct{})
}
