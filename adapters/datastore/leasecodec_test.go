package datastore

import (
	"errors"
	"testing"
	"time"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
)

var leaseExp = time.Date(2031, 2, 3, 4, 5, 6, 789000000, time.UTC)

func sameLease(a, b adapters.LeaseRecord) bool {
	return a.Holder == b.Holder && a.Epoch == b.Epoch && a.Expiry.Equal(b.Expiry) && a.Addr == b.Addr
}

func TestLeaseCodec(t *testing.T) {
	c := LeaseCodec{}
	ks := dscodec.Partition{Project: "p", Database: "db", Namespace: "ns"}.Keyspace()
	dflt := dscodec.Partition{Project: "p", Database: "db"}.Keyspace()
	for _, k := range []adapters.Keyspace{ks, dflt} {
		if got := c.Keyspace(k); got != dflt {
			t.Fatalf("Keyspace(%q) = %q, want %q", k, got, dflt)
		}
	}
	for _, r := range []adapters.LeaseRecord{
		{Holder: "node-1", Epoch: 7, Expiry: leaseExp, Addr: "10.0.0.7:7070"},
		{Holder: "", Epoch: 1 << 40, Expiry: leaseExp},
	} {
		b, err := c.Encode(ks, r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if !sameLease(got, r) {
			t.Fatalf("round trip %+v -> %+v", r, got)
		}
		// The entity is the documented one: four unindexed properties.
		er, err := dscodec.DecodeValue(b)
		if err != nil {
			t.Fatal(err)
		}
		props := er.GetEntity().GetProperties()
		if _, ok := props["Holder"].GetValueType().(*datastorepb.Value_StringValue); !ok {
			t.Errorf("Holder %v", props["Holder"])
		}
		if _, ok := props["Epoch"].GetValueType().(*datastorepb.Value_IntegerValue); !ok {
			t.Errorf("Epoch %v", props["Epoch"])
		}
		if props["Expiry"].GetTimestampValue() == nil {
			t.Errorf("Expiry %v", props["Expiry"])
		}
		if _, ok := props["Addr"].GetValueType().(*datastorepb.Value_StringValue); !ok {
			t.Errorf("Addr %v", props["Addr"])
		}
		for name, v := range props {
			if !v.GetExcludeFromIndexes() {
				t.Errorf("property %s is indexed", name)
			}
		}
	}
	if _, err := c.Encode(ks, adapters.LeaseRecord{Epoch: 1 << 63}); err == nil {
		t.Error("an epoch beyond int64 encoded")
	}
	if _, err := c.Decode([]byte("junk")); !errors.Is(err, adapters.ErrBadLeaseRecord) {
		t.Fatalf("Decode(junk) = %v", err)
	}
	for _, k := range []adapters.Keyspace{"", "Orders", "datastore/x"} {
		if c.Keyspace(k) != "" || c.Key(k) != nil {
			t.Errorf("%q is leasable", k)
		}
	}
	// The default namespace's lease is named "(default)", another's after it.
	for k, want := range map[adapters.Keyspace]string{dflt: DefaultNamespaceName, ks: "ns"} {
		path, err := dscodec.DecodePath(c.Key(k))
		if err != nil || len(path) != 1 || path[0].GetKind() != LeaseKind || path[0].GetName() != want {
			t.Errorf("lease key of %q: %v %v", k, path, err)
		}
	}
}

// A record written by a nemo that kept no peer address (no Addr property)
// decodes with Addr ""; an Addr that is not a string is not a lease record.
func TestLeaseCodecOlderRecords(t *testing.T) {
	entity := func(addr *datastorepb.Value) []byte {
		props := map[string]*datastorepb.Value{
			"Holder": {ValueType: &datastorepb.Value_StringValue{StringValue: "node-1"}, ExcludeFromIndexes: true},
			"Epoch":  {ValueType: &datastorepb.Value_IntegerValue{IntegerValue: 3}, ExcludeFromIndexes: true},
			"Expiry": {ValueType: &datastorepb.Value_TimestampValue{TimestampValue: timestamppb.New(leaseExp)}, ExcludeFromIndexes: true},
		}
		if addr != nil {
			props["Addr"] = addr
		}
		b, err := dscodec.EncodeValue(&datastorepb.EntityResult{Entity: &datastorepb.Entity{Properties: props}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	r, err := LeaseCodec{}.Decode(entity(nil))
	if err != nil || !sameLease(r, adapters.LeaseRecord{Holder: "node-1", Epoch: 3, Expiry: leaseExp}) {
		t.Fatalf("older record: %+v, %v", r, err)
	}
	if _, err := (LeaseCodec{}).Decode(entity(&datastorepb.Value{ValueType: &datastorepb.Value_IntegerValue{IntegerValue: 7070}})); !errors.Is(err, adapters.ErrBadLeaseRecord) {
		t.Fatalf("an integer Addr: %v", err)
	}
}

// FuzzLeaseDecode feeds arbitrary stored values to Decode: a lease record
// lives in the user's own database, where anyone with access can rewrite
// it. Decode must not panic, must refuse with ErrBadLeaseRecord, and the
// epoch of a record it accepts must survive the lease manager's next write
// of it.
func FuzzLeaseDecode(f *testing.F) {
	ks := dscodec.Partition{Project: "p", Database: "db", Namespace: "ns"}.Keyspace()
	for _, r := range []adapters.LeaseRecord{{Holder: "node-1", Epoch: 7, Expiry: leaseExp, Addr: "10.0.0.7:7070"}, {Epoch: 1 << 40, Expiry: leaseExp}} {
		b, err := LeaseCodec{}.Encode(ks, r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c := LeaseCodec{}
		r, err := c.Decode(b)
		if err != nil {
			if !errors.Is(err, adapters.ErrBadLeaseRecord) {
				t.Fatalf("Decode error %v does not wrap ErrBadLeaseRecord", err)
			}
			return
		}
		// A manager that reads a record writes its own holder and
		// address with the epoch it read (or the next) and an expiry of
		// its own: that must encode (an accepted epoch fits an integer)
		// and read back.
		w := adapters.LeaseRecord{Holder: "node-2", Epoch: r.Epoch, Expiry: leaseExp, Addr: "10.0.0.9:7070"}
		again, err := c.Encode(ks, w)
		if err != nil {
			t.Fatalf("%+v decoded but does not encode: %v", r, err)
		}
		if back, err := c.Decode(again); err != nil || !sameLease(back, w) {
			t.Fatalf("%+v re-encoded decodes to %+v, %v", w, back, err)
		}
	})
}
