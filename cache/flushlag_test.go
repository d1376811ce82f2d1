package cache

import (
	"testing"
	"time"
)

// TestFlushLagDuringOutage: FlushLag is the age of the oldest unflushed
// write, also while its write-back hangs in the store and after the
// write-back failed (issue 13: it read 0 during an outage while dirty bytes
// stayed up), and only its age: not the retry's due time.
func TestFlushLagDuringOutage(t *testing.T) {
	e := newEnv(t, PolicyNemo, "", "", func(o *Options) { o.MaxDirtyAge = 10 * time.Millisecond })
	s, err := e.b.space(testKS)
	if err != nil {
		t.Fatal(err)
	}
	lagAtLeast := func(what string, since time.Time) time.Duration {
		t.Helper()
		want := time.Since(since)
		lag := e.b.Stats().FlushLag
		if lag < want {
			t.Fatalf("%s: FlushLag %v, want at least %v", what, lag, want)
		}
		return lag
	}
	if err := e.b.Apply(e.ctx, testKS, []Write{{Key: []byte("a"), Value: []byte("1")}}); err != nil {
		t.Fatal(err)
	}
	written := time.Now() // a little after the record became dirty
	time.Sleep(20 * time.Millisecond)
	if err := e.b.Apply(e.ctx, testKS, []Write{{Key: []byte("b"), Value: []byte("2")}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)

	// The store hangs: the write-back of both records blocks in it.
	e.fs.SetHung(true)
	done := make(chan error, 1)
	go func() { done <- flushAged(e.ctx, e.b, testKS) }()
	for {
		s.mu.RLock()
		n := len(s.dirtyQ)
		s.mu.RUnlock()
		if n == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	lag := lagAtLeast("write-back hung", written)
	time.Sleep(30 * time.Millisecond)
	if later := lagAtLeast("write-back still hung", written); later < lag+30*time.Millisecond {
		t.Fatalf("FlushLag went from %v to %v in 30ms while the write-back hung", lag, later)
	}

	// The hang ends in a failure: the records are queued again as retries.
	e.fs.SetHung(false)
	if err := <-done; err == nil {
		t.Fatal("write-back through a hang succeeded")
	}
	lagAtLeast("after the failed write-back", written)

	// Failing at once, attempt after attempt.
	e.fs.SetDown(true)
	for range 3 {
		if err := flushAged(e.ctx, e.b, testKS); err == nil {
			t.Fatal("write-back during an outage succeeded")
		}
		lagAtLeast("outage", written)
	}
	if d := e.b.Stats().DirtyBytes; d == 0 {
		t.Fatal("nothing dirty during the outage")
	}

	// Back up: all written, no lag, nothing remembered.
	e.fs.SetDown(false)
	if err := flushAged(e.ctx, e.b, testKS); err != nil {
		t.Fatal(err)
	}
	if st := e.b.Stats(); st.FlushLag != 0 || st.DirtyBytes != 0 {
		t.Fatalf("after the outage: FlushLag %v, dirty bytes %d", st.FlushLag, st.DirtyBytes)
	}
	s.mu.RLock()
	taken := len(s.taken)
	s.mu.RUnlock()
	if taken != 0 {
		t.Fatalf("%d ages kept for clean records", taken)
	}
	e.check()
}

// TestFlushLagNewDirtyPeriod: a record the flusher failed to write back,
// then written back by Flush and written again, is as old as its new write.
func TestFlushLagNewDirtyPeriod(t *testing.T) {
	e := newEnv(t, PolicyNemo, "", "", func(o *Options) { o.MaxDirtyAge = time.Millisecond })
	if err := e.b.Apply(e.ctx, testKS, []Write{{Key: []byte("a"), Value: []byte("1")}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	e.fs.SetDown(true)
	if err := flushAged(e.ctx, e.b, testKS); err == nil {
		t.Fatal("write-back during an outage succeeded")
	}
	e.fs.SetDown(false)
	if err := flushAll(e.ctx, e.b); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	rewritten := time.Now()
	if err := e.b.Apply(e.ctx, testKS, []Write{{Key: []byte("a"), Value: []byte("2")}}); err != nil {
		t.Fatal(err)
	}
	if lag, most := e.b.Stats().FlushLag, time.Since(rewritten); lag > most {
		t.Fatalf("FlushLag %v, want at most %v: the age of the new write", lag, most)
	}
	if err := flushAged(e.ctx, e.b, testKS); err != nil {
		t.Fatal(err)
	}
	e.check()
}
