package cache

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Policy selects how much the buffer does.
type Policy string

const (
	// PolicyNemo is the full record buffer: positive and negative point
	// hits, range hits with hole filling, write-back.
	PolicyNemo Policy = "nemo"
	// PolicyRecord is the paper's positive-only record cache baseline:
	// point hits only; negative lookups and every range go to the store
	// (buffered writes are overlaid so answers stay correct).
	PolicyRecord Policy = "record"
	// PolicyNone passes every call through to the store; writes are
	// written through.
	PolicyNone Policy = "none"
)

// Options configures a Buffer. The zero value of a field means its default.
type Options struct {
	Policy Policy
	// MaxBytes is the byte budget: keys, values, tombstones, sentinels and
	// RecordOverhead per record all count. Default 256 MiB.
	MaxBytes int64
	// RecordOverhead is the fixed per-record cost charged to the budget,
	// standing for the record header and its tree slot. Default 64.
	RecordOverhead int64
	// EvictWorkers is the number of background eviction workers. Default 2.
	EvictWorkers int
	// EvictBatch is how many records the clock hand examines per step, and
	// the most records one admission adds beyond the budget. Default 64.
	EvictBatch int
	// MaxKeyBytes and MaxValueBytes bound user keys and values.
	// Defaults 4 KiB and 2 MiB.
	MaxKeyBytes   int
	MaxValueBytes int
	// FlushInterval is how often the flusher looks for old dirty records.
	// Default 1s.
	FlushInterval time.Duration
	// MaxDirtyBytes: beyond it the flusher writes back at once. Default 64 MiB.
	MaxDirtyBytes int64
	// MaxDirtyAge: a dirty record is written back within about this long.
	// Default 5s.
	MaxDirtyAge time.Duration
	// AdmitWait bounds how long an admission waits for eviction to make room
	// before it bypasses the buffer. Default 5ms.
	AdmitWait time.Duration
	// WriteBatch is the most records written back in one store call.
	// Default 100 (Azure's entity-group limit).
	WriteBatch int
	// DisableWorkers turns off the background evictor and flusher; tests
	// drive EvictStep and Flush by hand.
	DisableWorkers bool
	Logger         *slog.Logger
}

func (o Options) withDefaults() Options {
	def := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	defi := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defd := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if o.Policy == "" {
		o.Policy = PolicyNemo
	}
	def(&o.MaxBytes, 256<<20)
	def(&o.RecordOverhead, 64)
	def(&o.MaxDirtyBytes, 64<<20)
	defi(&o.EvictWorkers, 2)
	defi(&o.EvictBatch, 64)
	defi(&o.MaxKeyBytes, 4<<10)
	defi(&o.MaxValueBytes, 2<<20)
	defi(&o.WriteBatch, 100)
	defd(&o.FlushInterval, time.Second)
	defd(&o.MaxDirtyAge, 5*time.Second)
	defd(&o.AdmitWait, 5*time.Millisecond)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Validate reports every problem with the options at once.
func (o Options) Validate() error {
	var errs []error
	bad := func(f string, args ...any) { errs = append(errs, fmt.Errorf("cache: "+f, args...)) }
	switch o.Policy {
	case "", PolicyNemo, PolicyRecord, PolicyNone:
	default:
		bad("policy %q: want nemo, record or none", o.Policy)
	}
	if o.MaxBytes < 0 {
		bad("max bytes %d is negative", o.MaxBytes)
	}
	if o.RecordOverhead < 0 {
		bad("record overhead %d is negative", o.RecordOverhead)
	}
	if o.EvictWorkers < 0 || o.EvictBatch < 0 || o.WriteBatch < 0 {
		bad("evict workers, evict batch and write batch must not be negative")
	}
	if o.MaxKeyBytes < 0 || o.MaxValueBytes < 0 || o.MaxDirtyBytes < 0 {
		bad("key, value and dirty limits must not be negative")
	}
	if o.FlushInterval < 0 || o.MaxDirtyAge < 0 || o.AdmitWait < 0 {
		bad("durations must not be negative")
	}
	d := o.withDefaults()
	if d.MaxBytes < d.RecordOverhead+int64(d.MaxKeyBytes) {
		bad("max bytes %d cannot hold one record of the largest key", d.MaxBytes)
	}
	return errors.Join(errs...)
}
