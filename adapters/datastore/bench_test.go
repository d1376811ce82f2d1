package datastore

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
	"github.com/nemocache/nemo/internal/dstest"
)

// BenchmarkAdapterCalls is what the adapter itself costs per call over
// the emulator: a point read (Get of one present key: one Lookup), a range
// read of 8 (GetRange: one RunQuery) and a write (Upsert of one entity:
// one non-transactional Commit). cpu-ns/op is this process's CPU, user and
// system, per operation: the adapter, its retry and routing layer and its
// gRPC client (the emulator is a process of its own); calls/op is the
// remote calls per operation, counted on the connection; allocs/op and
// B/op are Go's. Compare two builds by running their test binaries in
// turn over one emulator, several rounds each: on a shared machine one
// round says little.
func BenchmarkAdapterCalls(b *testing.B) {
	var calls atomic.Int64
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		calls.Add(1)
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	s, err := Open(context.Background(), Options{EmulatorHost: dstest.Emulator(b),
		Interceptors: []grpc.UnaryClientInterceptor{count}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	p := dscodec.Partition{Project: dstest.Project(b)}
	ks := p.Keyspace()
	ctx := context.Background()
	var recs []adapters.Record
	for i := 1; i <= 64; i++ {
		recs = append(recs, record(b, p, []*datastorepb.Key_PathElement{idEl("K", int64(i))}, int64(i)))
	}
	if _, err := s.Upsert(ctx, ks, adapters.Puts(recs)); err != nil {
		b.Fatal(err)
	}
	ops := []struct {
		name string
		op   func(i int) error
	}{
		{"lookup", func(i int) error {
			got, err := s.Get(ctx, ks, [][]byte{recs[i%len(recs)].Key})
			if err == nil && got[0].Value == nil {
				b.Fatal("a present key read as absent")
			}
			return err
		}},
		{"runQuery", func(i int) error {
			got, _, err := s.GetRange(ctx, ks, recs[i%(len(recs)-8)].Key, nil, 8)
			if err == nil && len(got) != 8 {
				b.Fatalf("a range read of 8 answered %d", len(got))
			}
			return err
		}},
		{"commit", func(i int) error {
			_, err := s.Upsert(ctx, ks, adapters.Puts(recs[i%len(recs):i%len(recs)+1]))
			return err
		}},
	}
	for _, o := range ops {
		b.Run(o.name, func(b *testing.B) {
			b.ReportAllocs()
			calls.Store(0)
			cpu := processCPU()
			n := 0
			for b.Loop() {
				if err := o.op(n); err != nil {
					b.Fatal(err)
				}
				n++
			}
			b.ReportMetric(float64(processCPU()-cpu)/float64(n), "cpu-ns/op")
			b.ReportMetric(float64(calls.Load())/float64(n), "calls/op")
		})
	}
}

// BenchmarkCallLayer is the call layer alone (routing headers, retries,
// error mapping) around an RPC that succeeds at once ("ok") and one that
// fails once with UNAVAILABLE and then succeeds ("retry", with pauses of
// at most 1ns): what the layer adds to each remote call.
func BenchmarkCallLayer(b *testing.B) {
	s, err := Open(context.Background(), Options{EmulatorHost: "127.0.0.1:1", RetryBase: time.Nanosecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	p := dscodec.Partition{Project: "p", Database: "db"}
	unavailable := status.Error(codes.Unavailable, "injected")
	for _, fails := range []int{0, 1} {
		b.Run([]string{"ok", "retry"}[fails], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				n := 0
				err := s.call(routed(context.Background(), p), "lookup", func(context.Context) error {
					if n++; n <= fails {
						return unavailable
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// processCPU is the CPU time this process has used, user and system, in
// nanoseconds.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
