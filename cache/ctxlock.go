package cache

import "context"

// ctxMutex is a mutex whose Lock gives up when the caller's context ends.
// The buffer holds two locks across store calls (a keyspace's write-back
// lock and the keyspace gate's run lock); with plain mutexes a caller
// queued behind a hung store call would wait past any deadline it has.
// Its zero value is not usable: make one with newCtxMutex.
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

// lock takes the mutex whatever happens: for callers that make no store
// call while waiting and must not fail (a keyspace drop, Check).
func (m ctxMutex) lock() { m.ch <- struct{}{} }

func (m ctxMutex) Unlock() { <-m.ch }
