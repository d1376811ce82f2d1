package datastore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/datastore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/fault"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/internal/dstest"
	"github.com/nemocache/nemo/wal"
)

// TestSentCommitRunsToTheClientsDeadline: in coherence shared, a commit
// nemo has sent to the store (slowed by injected latency, past the
// frontend's request timeout) runs on to the client's own deadline, capped
// by Options.WriteTimeout, instead of being cut off at the request timeout
// with its outcome unknown; what ends it first is answered
// DEADLINE_EXCEEDED, and a write cut off before it reached the store is not
// in the store.
func TestSentCommitRunsToTheClientsDeadline(t *testing.T) {
	base := datastoreBackend("emulator-shared", dstest.Emulator, true)
	var fs *fault.Store
	b := base
	b.open = func(t testing.TB) (adapters.Store, IDAllocator) {
		s, a := base.open(t)
		fs = fault.New(s, fault.Config{})
		return fs, a
	}
	const requestTimeout, writeTimeout = 300 * time.Millisecond, 3 * time.Second
	project := dstest.Project(t)
	n := startNemoServed(t, b, project, cache.Options{}, serving{requestTimeout: requestTimeout, writeTimeout: writeTimeout})
	c := client(t, n.addr, project)
	direct := client(t, dstest.Emulator(t), project)
	slowWrites := func(d time.Duration) {
		fs.SetConfig(fault.Config{Ops: map[adapters.Op]fault.OpConfig{
			adapters.OpUpsert: {Latency: d}, adapters.OpDelete: {Latency: d}, adapters.OpWriteAtomic: {Latency: d}}})
	}
	t.Cleanup(func() { fs.SetConfig(fault.Config{}) })
	absent := func(t *testing.T, k *datastore.Key) {
		t.Helper()
		var got contendedDoc
		if err := direct.Get(context.Background(), k, &got); !errors.Is(err, datastore.ErrNoSuchEntity) {
			t.Fatalf("a write cut off before it reached the store is there: %+v, %v", got, err)
		}
	}

	t.Run("TransactionCommit", func(t *testing.T) {
		k := datastore.NameKey("SlowCommit", "tx", nil)
		if _, err := c.Put(context.Background(), k, &contendedDoc{1}); err != nil {
			t.Fatal(err)
		}
		slowWrites(time.Second)
		defer slowWrites(0)
		began := time.Now()
		err := incrementOnce(context.Background(), c, k)
		took := time.Since(began)
		if err != nil || took < time.Second {
			t.Fatalf("a transaction whose commit takes 1 s: %v after %v, want success after at least 1 s", err, took)
		}
		var got contendedDoc
		if err := direct.Get(context.Background(), k, &got); err != nil || got.N != 2 {
			t.Fatalf("the store after the acknowledged commit: %+v, %v", got, err)
		}
	})

	t.Run("ClientDeadlineEndsIt", func(t *testing.T) {
		k := datastore.NameKey("SlowCommit", "client-deadline", nil)
		slowWrites(2 * time.Second)
		defer slowWrites(0)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		began := time.Now()
		_, err := c.Put(ctx, k, &contendedDoc{1})
		took := time.Since(began)
		if status.Code(err) != codes.DeadlineExceeded || took < time.Second-50*time.Millisecond || took > 1900*time.Millisecond {
			t.Fatalf("a 2 s commit under a 1 s client deadline: %v after %v, want DEADLINE_EXCEEDED at the client's deadline", err, took)
		}
		time.Sleep(1500 * time.Millisecond) // past the injected latency
		absent(t, k)
	})

	t.Run("WriteTimeoutCapsIt", func(t *testing.T) {
		k := datastore.NameKey("SlowCommit", "capped", nil)
		slowWrites(6 * time.Second)
		defer slowWrites(0)
		began := time.Now()
		_, err := c.Put(context.Background(), k, &contendedDoc{1})
		took := time.Since(began)
		if status.Code(err) != codes.DeadlineExceeded || took < writeTimeout-50*time.Millisecond || took > writeTimeout+time.Second {
			t.Fatalf("a 6 s commit with a %v write timeout: %v after %v, want DEADLINE_EXCEEDED at the write timeout", writeTimeout, err, took)
		}
		absent(t, k)
	})
}

// TestLoggedCommitOutlivesRequestDeadline: in coherence exclusive, a
// commit the WAL has taken is written whatever its request's deadline
// says, so the frontend waits for its fsync (slowed to 1 s, past the 300 ms
// request timeout) and answers its outcome, with early release and
// without, rather than DEADLINE_EXCEEDED at its own deadline for a commit
// that then takes effect.
func TestLoggedCommitOutlivesRequestDeadline(t *testing.T) {
	for _, early := range []bool{false, true} {
		t.Run(fmt.Sprintf("early=%v", early), func(t *testing.T) {
			var slow atomic.Bool
			fsys := slowSyncFS{slow: &slow, delay: time.Second}
			project := dstest.Project(t)
			n := startNemoServed(t, embeddedBackend(t.TempDir()), project, cache.Options{},
				serving{requestTimeout: 300 * time.Millisecond, wal: &wal.Options{Dir: t.TempDir(), FS: fsys}, earlyRelease: early})
			c := client(t, n.addr, project)
			ctx := context.Background()
			k := datastore.NameKey("SlowSync", "k", nil)
			slow.Store(true)
			began := time.Now()
			_, err := c.Put(ctx, k, &contendedDoc{1})
			took := time.Since(began)
			slow.Store(false)
			if err != nil || took < time.Second {
				t.Fatalf("a put whose fsync takes 1 s: %v after %v, want success after at least 1 s", err, took)
			}
			var got contendedDoc
			if err := c.Get(ctx, k, &got); err != nil || got.N != 1 {
				t.Fatalf("after the acknowledged put: %+v, %v", got, err)
			}
		})
	}
}

// slowSyncFS is the OS's file system, whose files' fsync take delay more
// while slow is set.
type slowSyncFS struct {
	wal.OSFS
	slow  *atomic.Bool
	delay time.Duration
}

func (f slowSyncFS) OpenFile(name string, flag int, perm fs.FileMode) (wal.File, error) {
	file, err := f.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return slowSyncFile{File: file, fs: f}, nil
}

type slowSyncFile struct {
	wal.File
	fs slowSyncFS
}

func (f slowSyncFile) Sync() error {
	if f.fs.slow.Load() {
		time.Sleep(f.fs.delay)
	}
	return f.File.Sync()
}
