// Package leasetest checks a backend's lease codec, the LeaseCodec an
// adapter provides for txn/lease: the records a lease manager writes
// round-trip (the holder's peer address included, and a released record's
// empty one), an epoch beyond the stores' signed 64-bit integers is
// refused, and a stored value that is not a lease record is refused with
// adapters.ErrBadLeaseRecord, never with a panic (Redecode, the body of
// each adapter's FuzzLeaseDecode: a lease record lives in the user's own
// store, where anyone with access can rewrite it).
package leasetest

import (
	"errors"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
)

// Codec is the part of a lease codec under test.
type Codec interface {
	Encode(ks adapters.Keyspace, r adapters.LeaseRecord) ([]byte, error)
	Decode(b []byte) (adapters.LeaseRecord, error)
}

// Expiry is the Expiry of Records: millisecond precision, as the lease
// manager writes it.
var Expiry = time.Date(2031, 2, 3, 4, 5, 6, 789000000, time.UTC)

// Records are a held and a released lease record, the fuzz targets' seeds.
var Records = []adapters.LeaseRecord{
	{Holder: "node-1", Epoch: 7, Expiry: Expiry, Addr: "10.0.0.7:7070"},
	{Holder: "", Epoch: 1 << 40, Expiry: Expiry},
}

// Same says whether a and b are the same record.
func Same(a, b adapters.LeaseRecord) bool {
	return a.Holder == b.Holder && a.Epoch == b.Epoch && a.Expiry.Equal(b.Expiry) && a.Addr == b.Addr
}

// RoundTrip checks that Records survive c's Encode for ks and Decode, that
// an epoch of 2^63 is refused, and that junk is an ErrBadLeaseRecord.
func RoundTrip(t *testing.T, c Codec, ks adapters.Keyspace) {
	t.Helper()
	for _, r := range Records {
		b, err := c.Encode(ks, r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if !Same(got, r) {
			t.Fatalf("round trip %+v -> %+v", r, got)
		}
	}
	if _, err := c.Encode(ks, adapters.LeaseRecord{Epoch: 1 << 63}); err == nil {
		t.Error("an epoch beyond a signed 64-bit integer encoded")
	}
	if _, err := c.Decode([]byte("junk")); !errors.Is(err, adapters.ErrBadLeaseRecord) {
		t.Errorf("Decode(junk) = %v, want ErrBadLeaseRecord", err)
	}
}

// Redecode decodes the stored value b with c: it must be refused with
// ErrBadLeaseRecord, or be a record whose epoch survives the manager's next
// write of ks (its own holder, address and expiry with the epoch it read):
// that must encode (an accepted epoch fits the store's integer) and read
// back.
func Redecode(t *testing.T, c Codec, ks adapters.Keyspace, b []byte) {
	t.Helper()
	r, err := c.Decode(b)
	if err != nil {
		if !errors.Is(err, adapters.ErrBadLeaseRecord) {
			t.Fatalf("Decode error %v does not wrap ErrBadLeaseRecord", err)
		}
		return
	}
	w := adapters.LeaseRecord{Holder: "node-2", Epoch: r.Epoch, Expiry: Expiry, Addr: "10.0.0.9:7070"}
	again, err := c.Encode(ks, w)
	if err != nil {
		t.Fatalf("%+v decoded but does not encode: %v", r, err)
	}
	if back, err := c.Decode(again); err != nil || !Same(back, w) {
		t.Fatalf("%+v re-encoded decodes to %+v, %v", w, back, err)
	}
}
