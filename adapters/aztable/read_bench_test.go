package aztable

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
)

// BenchmarkPointRead measures the client side of a point read of a 1 KiB
// entity in front of Azurite: the Store's Get (the body kept by bodyPolicy,
// parsed once) against the same read through the SDK's own decoding (its
// map and re-encoding, then the captured body parsed), in alternating
// slices of 200 reads each. It reports the process's CPU per read of each
// (user and system, so the Go HTTP stack is in both) and their ratio.
func BenchmarkPointRead(b *testing.B) {
	s := newAzurite(b)
	ks := newTable(b, s, "pointread")
	var props []tablecodec.Property
	for i := range 10 {
		props = append(props, tablecodec.Property{Name: fmt.Sprintf("P%d", i), Type: tablecodec.EdmString, Value: strings.Repeat("x", 90)})
	}
	ctx := context.Background()
	rec := entity("p", "r", props...)
	if _, err := s.Upsert(ctx, ks, []adapters.Write{{Key: rec.Key, Value: rec.Value}}); err != nil {
		b.Fatal(err)
	}
	keys := [][]byte{rec.Key}
	kept := func() error {
		got, err := s.Get(ctx, ks, keys)
		if err == nil && got[0].Value == nil {
			err = fmt.Errorf("entity not found")
		}
		return err
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
	var cpu [2]time.Duration
	n := 0
	for b.Loop() {
		for i, read := range []func() error{sdk, kept} {
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
	b.ReportMetric(float64(cpu[1])/float64(cpu[0]), "kept/sdk")
}

// processCPU is the CPU time this process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
