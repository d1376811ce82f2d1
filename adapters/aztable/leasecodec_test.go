package aztable

import (
	"errors"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
)

var leaseExp = time.Date(2031, 2, 3, 4, 5, 6, 789000000, time.UTC)

func sameLease(a, b adapters.LeaseRecord) bool {
	return a.Holder == b.Holder && a.Epoch == b.Epoch && a.Expiry.Equal(b.Expiry) && a.Addr == b.Addr
}

func TestLeaseCodec(t *testing.T) {
	c := LeaseCodec{}
	if got := c.Keyspace("Orders"); got != LeaseTable {
		t.Fatalf("Keyspace = %q, want %q", got, LeaseTable)
	}
	for _, r := range []adapters.LeaseRecord{
		{Holder: "node-1", Epoch: 7, Expiry: leaseExp, Addr: "10.0.0.7:7070"},
		{Holder: "", Epoch: 1 << 40, Expiry: leaseExp},
	} {
		b, err := c.Encode("Orders", r)
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
		// The entity is the documented one: the lease table's keys and
		// four typed properties.
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
	if _, err := c.Encode("Orders", adapters.LeaseRecord{Epoch: 1 << 63}); err == nil {
		t.Error("an epoch beyond Int64 encoded")
	}
	if _, err := c.Decode([]byte("junk")); !errors.Is(err, adapters.ErrBadLeaseRecord) {
		t.Fatalf("Decode(junk) = %v", err)
	}
	for _, ks := range []adapters.Keyspace{"", tablecodec.TablesKeyspace, "NemoLeases"} {
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
	expiry := tablecodec.Property{Name: "Expiry", Type: tablecodec.EdmDateTime, Value: leaseExp}
	old := entity(holder, tablecodec.Property{Name: "Epoch", Type: tablecodec.EdmInt64, Value: int64(3)}, expiry)
	r, err := LeaseCodec{}.Decode(old)
	if err != nil || !sameLease(r, adapters.LeaseRecord{Holder: "node-1", Epoch: 3, Expiry: leaseExp}) {
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

// FuzzLeaseDecode feeds arbitrary stored values to Decode: a lease record
// lives in the user's own table, where anyone with access can rewrite it.
// Decode must not panic, must refuse with ErrBadLeaseRecord, and the epoch
// of a record it accepts must survive the lease manager's next write of it.
func FuzzLeaseDecode(f *testing.F) {
	for _, r := range []adapters.LeaseRecord{{Holder: "node-1", Epoch: 7, Expiry: leaseExp, Addr: "10.0.0.7:7070"}, {Epoch: 1 << 40, Expiry: leaseExp}} {
		b, err := LeaseCodec{}.Encode("Orders", r)
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
		// its own: that must encode (an accepted epoch fits an Int64) and
		// read back.
		w := adapters.LeaseRecord{Holder: "node-2", Epoch: r.Epoch, Expiry: leaseExp, Addr: "10.0.0.9:7070"}
		again, err := c.Encode("Orders", w)
		if err != nil {
			t.Fatalf("%+v decoded but does not encode: %v", r, err)
		}
		if back, err := c.Decode(again); err != nil || !sameLease(back, w) {
			t.Fatalf("%+v re-encoded decodes to %+v, %v", w, back, err)
		}
	})
}
