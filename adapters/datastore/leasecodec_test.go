package datastore

import (
	"errors"
	"testing"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
	"github.com/nemocache/nemo/adapters/leasetest"
)

func TestLeaseCodec(t *testing.T) {
	c := LeaseCodec{}
	ks := dscodec.Partition{Project: "p", Database: "db", Namespace: "ns"}.Keyspace()
	dflt := dscodec.Partition{Project: "p", Database: "db"}.Keyspace()
	for _, k := range []adapters.Keyspace{ks, dflt} {
		if got := c.Keyspace(k); got != dflt {
			t.Fatalf("Keyspace(%q) = %q, want %q", k, got, dflt)
		}
	}
	leasetest.RoundTrip(t, c, ks)
	// The entity is the documented one: four unindexed properties.
	for _, r := range leasetest.Records {
		b, err := c.Encode(ks, r)
		if err != nil {
			t.Fatal(err)
		}
		er, err := dscodec.DecodeValue(b)
		if err != nil {
			t.Fatal(err)
		}
		props := er.GetEntity().GetProperties()
		_, holder := props["Holder"].GetValueType().(*datastorepb.Value_StringValue)
		_, epoch := props["Epoch"].GetValueType().(*datastorepb.Value_IntegerValue)
		_, addr := props["Addr"].GetValueType().(*datastorepb.Value_StringValue)
		if !holder || !epoch || !addr || props["Expiry"].GetTimestampValue() == nil || len(props) != 4 {
			t.Errorf("lease entity properties %v", props)
		}
		for name, v := range props {
			if !v.GetExcludeFromIndexes() {
				t.Errorf("property %s is indexed", name)
			}
		}
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
			"Expiry": {ValueType: &datastorepb.Value_TimestampValue{TimestampValue: timestamppb.New(leasetest.Expiry)}, ExcludeFromIndexes: true},
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
	if err != nil || !leasetest.Same(r, adapters.LeaseRecord{Holder: "node-1", Epoch: 3, Expiry: leasetest.Expiry}) {
		t.Fatalf("older record: %+v, %v", r, err)
	}
	if _, err := (LeaseCodec{}).Decode(entity(&datastorepb.Value{ValueType: &datastorepb.Value_IntegerValue{IntegerValue: 7070}})); !errors.Is(err, adapters.ErrBadLeaseRecord) {
		t.Fatalf("an integer Addr: %v", err)
	}
}

// FuzzLeaseDecode: Decode refuses any stored value that is not a lease
// record with ErrBadLeaseRecord, never panics, and an epoch it accepts
// survives the manager's next write (leasetest.Redecode).
func FuzzLeaseDecode(f *testing.F) {
	ks := dscodec.Partition{Project: "p", Database: "db", Namespace: "ns"}.Keyspace()
	for _, r := range leasetest.Records {
		b, err := LeaseCodec{}.Encode(ks, r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { leasetest.Redecode(t, LeaseCodec{}, ks, b) })
}
