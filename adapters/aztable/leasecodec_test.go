package aztable

import (
	"errors"
	"testing"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
	"github.com/nemocache/nemo/adapters/leasetest"
)

func TestLeaseCodec(t *testing.T) {
	c := LeaseCodec{}
	if got := c.Keyspace("Orders"); got != LeaseTable {
		t.Fatalf("Keyspace = %q, want %q", got, LeaseTable)
	}
	leasetest.RoundTrip(t, c, "Orders")
	// The entity is the documented one: the lease table's keys and four
	// typed properties.
	for _, r := range leasetest.Records {
		b, err := c.Encode("Orders", r)
		if err != nil {
			t.Fatal(err)
		}
		e, err := tablecodec.DecodeEntity(b)
		if err != nil {
			t.Fatal(err)
		}
		if e.PartitionKey != LeasePartition || e.RowKey != "orders" {
			t.Fatalf("entity keys %q %q", e.PartitionKey, e.RowKey)
		}
		for name, typ := range map[string]tablecodec.EdmType{"Holder": tablecodec.EdmString, "Epoch": tablecodec.EdmInt64,
			"Expiry": tablecodec.EdmDateTime, "Addr": tablecodec.EdmString} {
			if p, ok := e.Get(name); !ok || p.Type != typ {
				t.Errorf("property %s: %+v, want type %v", name, p, typ)
			}
		}
	}
	for _, ks := range []adapters.Keyspace{"", tablecodec.TablesKeyspace, "NemoLeases", "NemoLog"} {
		if c.Keyspace(ks) != "" || c.Key(ks) != nil {
			t.Errorf("%q is leasable", ks)
		}
	}
	// Table names are case-insensitive, so is the lease.
	if string(c.Key("Orders")) != string(c.Key("orders")) {
		t.Error("Orders and orders have different leases")
	}
}

// A record written by a nemo that kept no peer address (no Addr property)
// decodes with Addr "", as does one whose Epoch an outside tool wrote as
// an Int32; an Addr that is not a string is not a lease record.
func TestLeaseCodecOlderRecords(t *testing.T) {
	entity := func(props ...tablecodec.Property) []byte {
		return tablecodec.EncodeEntity(&tablecodec.Entity{PartitionKey: LeasePartition, RowKey: "orders", Props: props})
	}
	holder := tablecodec.Property{Name: "Holder", Type: tablecodec.EdmString, Value: "node-1"}
	expiry := tablecodec.Property{Name: "Expiry", Type: tablecodec.EdmDateTime, Value: leasetest.Expiry}
	old := entity(holder, tablecodec.Property{Name: "Epoch", Type: tablecodec.EdmInt64, Value: int64(3)}, expiry)
	r, err := LeaseCodec{}.Decode(old)
	if err != nil || !leasetest.Same(r, adapters.LeaseRecord{Holder: "node-1", Epoch: 3, Expiry: leasetest.Expiry}) {
		t.Fatalf("older record: %+v, %v", r, err)
	}
	r, err = LeaseCodec{}.Decode(entity(holder, tablecodec.Property{Name: "Epoch", Type: tablecodec.EdmInt32, Value: int32(4)}))
	if err != nil || r.Epoch != 4 || r.Addr != "" {
		t.Fatalf("Int32 epoch: %+v, %v", r, err)
	}
	bad := entity(holder, tablecodec.Property{Name: "Epoch", Type: tablecodec.EdmInt64, Value: int64(3)},
		tablecodec.Property{Name: "Addr", Type: tablecodec.EdmInt32, Value: int32(7070)})
	if _, err := (LeaseCodec{}).Decode(bad); !errors.Is(err, adapters.ErrBadLeaseRecord) {
		t.Fatalf("an Int32 Addr: %v", err)
	}
}

// FuzzLeaseDecode: Decode refuses any stored value that is not a lease
// record with ErrBadLeaseRecord, never panics, and an epoch it accepts
// survives the manager's next write (leasetest.Redecode).
func FuzzLeaseDecode(f *testing.F) {
	for _, r := range leasetest.Records {
		b, err := LeaseCodec{}.Encode("Orders", r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { leasetest.Redecode(t, LeaseCodec{}, "Orders", b) })
}
