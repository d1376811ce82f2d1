package lease

import (
	"errors"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
)

func TestCodecs(t *testing.T) {
	exp := time.Date(2031, 2, 3, 4, 5, 6, 789000000, time.UTC)
	ds := dscodec.Partition{Project: "p", Database: "db", Namespace: "ns"}.Keyspace()
	dsDefault := dscodec.Partition{Project: "p", Database: "db"}.Keyspace()
	for _, tc := range []struct {
		name  string
		codec Codec
		ks    adapters.Keyspace
		lks   adapters.Keyspace
		bad   []adapters.Keyspace
	}{
		{"azure", AzTableCodec(), "Orders", LeaseTable, []adapters.Keyspace{"", tablecodec.TablesKeyspace, "NemoLeases"}},
		{"datastore", DatastoreCodec(), ds, dsDefault, []adapters.Keyspace{"", "Orders", "datastore/x"}},
		{"datastore-default", DatastoreCodec(), dsDefault, dsDefault, nil},
		{"raw", RawCodec("leases"), "t1", "leases", []adapters.Keyspace{"", "leases"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.codec.Keyspace(tc.ks); got != tc.lks {
				t.Fatalf("Keyspace = %q, want %q", got, tc.lks)
			}
			if len(tc.codec.Key(tc.ks)) == 0 {
				t.Fatal("no key")
			}
			for _, r := range []Record{{Holder: "node-1", Epoch: 7, Expiry: exp}, {Holder: "", Epoch: 1 << 40, Expiry: exp}} {
				b, err := tc.codec.Encode(tc.ks, r)
				if err != nil {
					t.Fatal(err)
				}
				got, err := tc.codec.Decode(b)
				if err != nil {
					t.Fatal(err)
				}
				if got.Holder != r.Holder || got.Epoch != r.Epoch || !got.Expiry.Equal(r.Expiry) {
					t.Fatalf("round trip %+v -> %+v", r, got)
				}
			}
			if _, err := tc.codec.Decode([]byte("junk")); !errors.Is(err, ErrBadRecord) {
				t.Fatalf("Decode(junk) = %v", err)
			}
			for _, ks := range tc.bad {
				if tc.codec.Keyspace(ks) != "" || tc.codec.Key(ks) != nil {
					t.Errorf("%q is leasable", ks)
				}
			}
		})
	}
	// Azure: table names are case-insensitive, so is the lease.
	az := AzTableCodec()
	if string(az.Key("Orders")) != string(az.Key("orders")) {
		t.Error("Orders and orders have different leases")
	}
	// Datastore: the default namespace's lease is named "(default)".
	path, err := dscodec.DecodePath(DatastoreCodec().Key(dsDefault))
	if err != nil || len(path) != 1 || path[0].GetKind() != LeaseKind || path[0].GetName() != DefaultNamespaceName {
		t.Errorf("default namespace lease key %v %v", path, err)
	}
}
