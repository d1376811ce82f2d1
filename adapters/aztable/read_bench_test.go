package aztable

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
	"github.com/nemocache/nemo/internal/aztest"
)

// BenchmarkPointRead measures the client side of a point read of a 1 KiB
// entity in front of Azurite, four ways in alternating slices of 200
// reads each: through the SDK's own decoding (its map and re-encoding,
// then the captured body parsed), through the SDK with the body kept by
// bodyPolicy and parsed once (how a Store without an account key reads),
// the direct signed GET (direct.go) through net/http's transport, and the
// Store's Get with an account key (the direct GET on the lean transport,
// h1.go). It reports the process's CPU per read of each (user and system,
// so the Go HTTP stack is in all four) and the ratios.
func BenchmarkPointRead(b *testing.B) {
	s, ks, rec := pointReadEntity(b, "pointread")
	ctx := context.Background()
	keys := [][]byte{rec.Key}
	viaSDK, err := New(Options{ConnectionString: aztest.ConnectionString(aztest.Azurite(b), aztest.Key), MaxRetries: 2})
	if err != nil {
		b.Fatal(err)
	}
	viaSDK.direct = nil
	viaNetHTTP, err := New(Options{ConnectionString: aztest.ConnectionString(aztest.Azurite(b), aztest.Key), MaxRetries: 2})
	if err != nil {
		b.Fatal(err)
	}
	viaNetHTTP.direct.do = pooledClient().Transport.RoundTrip
	getWith := func(s *Store) func() error {
		return func() error {
			got, err := s.Get(ctx, ks, keys)
			if err == nil && got[0].Value == nil {
				err = fmt.Errorf("entity not found")
			}
			return err
		}
	}
	c := s.table(ks)
	sdk := func() error {
		var raw *http.Response
		format := aztables.MetadataFormatMinimal
		if _, err := c.GetEntity(policy.WithCaptureResponse(ctx, &raw), "p", "r", &aztables.GetEntityOptions{Format: &format}); err != nil {
			return err
		}
		body, err := payload(raw)
		if err != nil {
			return err
		}
		_, err = decodeEntity(body)
		return err
	}
	const slice = 200
	var cpu [4]time.Duration
	n := 0
	for b.Loop() {
		for i, read := range []func() error{sdk, getWith(viaSDK), getWith(viaNetHTTP), getWith(s)} {
			start := processCPU()
			for range slice {
				if err := read(); err != nil {
					b.Fatal(err)
				}
			}
			cpu[i] += processCPU() - start
		}
		n += slice
	}
	b.ReportMetric(float64(cpu[0].Microseconds())/float64(n), "sdk_cpu_µs/read")
	b.ReportMetric(float64(cpu[1].Microseconds())/float64(n), "kept_cpu_µs/read")
	b.ReportMetric(float64(cpu[2].Microseconds())/float64(n), "direct_cpu_µs/read")
	b.ReportMetric(float64(cpu[3].Microseconds())/float64(n), "lean_cpu_µs/read")
	b.ReportMetric(float64(cpu[1])/float64(cpu[0]), "kept/sdk")
	b.ReportMetric(float64(cpu[2])/float64(cpu[1]), "direct/kept")
	b.ReportMetric(float64(cpu[3])/float64(cpu[2]), "lean/direct")
}

// pointReadEntity is a Store on Azurite, a new table named after prefix,
// and the 1 KiB entity the point-read benchmarks read, stored in it.
func pointReadEntity(b *testing.B, prefix string) (*Store, adapters.Keyspace, adapters.Record) {
	s := newAzurite(b)
	ks := newTable(b, s, prefix)
	var props []tablecodec.Property
	for i := range 10 {
		props = append(props, tablecodec.Property{Name: fmt.Sprintf("P%d", i), Type: tablecodec.EdmString, Value: strings.Repeat("x", 90)})
	}
	rec := entity("p", "r", props...)
	if _, err := s.Upsert(context.Background(), ks, []adapters.Write{{Key: rec.Key, Value: rec.Value}}); err != nil {
		b.Fatal(err)
	}
	return s, ks, rec
}

// processCPU is the CPU time this process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPointReadParallel compares the two transports of the direct
// point read under concurrency, as nemo's misses and refreshes use them:
// 16 goroutines reading a 1 KiB entity in front of Azurite, in
// alternating slices of 1,600 reads, through net/http's transport and
// through the lean one (h1.go). It reports the process's CPU per read of
// each (user and system) and their ratio.
func BenchmarkPointReadParallel(b *testing.B) {
	s, ks, rec := pointReadEntity(b, "pointpar")
	ctx := context.Background()
	viaNetHTTP, err := New(Options{ConnectionString: aztest.ConnectionString(aztest.Azurite(b), aztest.Key), MaxRetries: 2})
	if err != nil {
		b.Fatal(err)
	}
	viaNetHTTP.direct.do = pooledClient().Transport.RoundTrip
	const workers, perWorker = 16, 100
	slice := func(s *Store) time.Duration {
		start := processCPU()
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range perWorker {
					got, err := s.Get(ctx, ks, [][]byte{rec.Key})
					if err == nil && got[0].Value == nil {
						err = fmt.Errorf("entity not found")
					}
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
		return processCPU() - start
	}
	var cpu [2]time.Duration
	n := 0
	for b.Loop() {
		cpu[0] += slice(viaNetHTTP)
		cpu[1] += slice(s)
		n += workers * perWorker
	}
	b.ReportMetric(float64(cpu[0].Microseconds())/float64(n), "nethttp_cpu_µs/read")
	b.ReportMetric(float64(cpu[1].Microseconds())/float64(n), "lean_cpu_µs/read")
	b.ReportMetric(float64(cpu[1])/float64(cpu[0]), "lean/nethttp")
}
