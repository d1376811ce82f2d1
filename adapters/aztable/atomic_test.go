package aztable

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/atomictest"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
)

func atomicValue(key []byte, n int) []byte {
	pk, rk, err := tablecodec.DecodeKey(key)
	if err != nil {
		panic(err)
	}
	return entity(pk, rk, tablecodec.Property{Name: "N", Type: tablecodec.EdmInt32, Value: int32(n)}).Value
}

// TestWriteAtomic runs the atomic-writer kit in a partition and in the
// partition "" (direct requests, as with an account key), and in a
// partition through the SDK (as with a token credential, which writes
// only the partition "" directly).
func TestWriteAtomic(t *testing.T) {
	for _, tc := range []struct {
		pk  string
		sdk bool
	}{{"p", false}, {"", false}, {"p", true}} {
		t.Run(fmt.Sprintf("partition %q, SDK %v", tc.pk, tc.sdk), func(t *testing.T) { writeAtomic(t, tc.pk, tc.sdk) })
	}
}

func writeAtomic(t *testing.T, pk string, sdk bool) {
	s := newAzurite(t)
	if sdk {
		s.direct = nil
	}
	atomictest.Run(t, atomictest.Kit{
		Store:    s,
		Keyspace: func(t *testing.T) adapters.Keyspace { return newTable(t, s, "atomic") },
		Key:      func(i int) []byte { return tablecodec.EncodeKey(pk, fmt.Sprintf("r%04d", i)) },
		Value:    atomicValue,
		Payload: func(t *testing.T, v []byte) int {
			p, ok := decode(t, v).Get("N")
			if !ok {
				t.Fatalf("entity without N: %x", v)
			}
			return int(p.Value.(int32))
		},
		MaxGroup:       MaxAtomic,
		NoDeleteAbsent: true,
		NoCheck:        true,
		Invalid: func(*testing.T) [][]adapters.Mutation {
			a, b := tablecodec.EncodeKey("p", "x1"), tablecodec.EncodeKey("q", "x2")
			big := entity("p", "x3", tablecodec.Property{Name: "B", Type: tablecodec.EdmBinary, Value: make([]byte, 60<<10)}).Value
			var large []adapters.Mutation
			for i := range 70 { // 70 × 60 KiB binary: over 4 MiB of JSON
				k := tablecodec.EncodeKey("p", fmt.Sprintf("x3-%d", i))
				e := decode(t, big)
				e.RowKey = fmt.Sprintf("x3-%d", i)
				large = append(large, atomictest.Upsert(k, tablecodec.EncodeEntity(e), adapters.Expect{}))
			}
			return [][]adapters.Mutation{
				{atomictest.Upsert(a, atomicValue(a, 1), adapters.Expect{}), atomictest.Upsert(b, atomicValue(b, 2), adapters.Expect{})},
				{atomictest.Upsert(a, atomicValue(b, 1), adapters.Expect{})}, // the value names another key
				large,
			}
		},
	})
}

// TestWriteAtomicDeleteAbsentAny: deleting absent entities with If-Match *
// fails a transaction with 404; WriteAtomic drops those deletes and
// submits the rest, still as one transaction.
func TestWriteAtomicDeleteAbsentAny(t *testing.T) {
	for _, pk := range []string{"p", ""} {
		t.Run(fmt.Sprintf("partition %q", pk), func(t *testing.T) { writeAtomicDeleteAbsentAny(t, pk) })
	}
}

func writeAtomicDeleteAbsentAny(t *testing.T, pk string) {
	s := newAzurite(t)
	ks := newTable(t, s, "atomicdel")
	ctx := context.Background()
	k := func(rk string) []byte { return tablecodec.EncodeKey(pk, rk) }
	if _, err := s.WriteAtomic(ctx, ks, []adapters.Mutation{atomictest.Upsert(k("present"), atomicValue(k("present"), 1), adapters.Expect{})}); err != nil {
		t.Fatal(err)
	}
	vers, err := s.WriteAtomic(ctx, ks, []adapters.Mutation{
		atomictest.Delete(k("gone1"), adapters.Expect{}),
		atomictest.Upsert(k("new"), atomicValue(k("new"), 2), adapters.Expect{Kind: adapters.ExpectAbsent}),
		atomictest.Delete(k("present"), adapters.Expect{}),
		atomictest.Delete(k("gone2"), adapters.Expect{}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if vers[0] != "" || vers[1] == "" || vers[2] != "" || vers[3] != "" {
		t.Fatalf("versions %q", vers)
	}
	recs, err := s.Get(ctx, ks, [][]byte{k("present"), k("new")})
	if err != nil {
		t.Fatal(err)
	}
	if recs[0].Value != nil || recs[1].Version != vers[1] {
		t.Fatalf("after the group: present=%x new=%q (want %q)", recs[0].Value, recs[1].Version, vers[1])
	}
	// Only deletes of absent entities: nothing to do.
	if _, err := s.WriteAtomic(ctx, ks, []adapters.Mutation{atomictest.Delete(k("gone1"), adapters.Expect{}), atomictest.Delete(k("gone2"), adapters.Expect{})}); err != nil {
		t.Fatal(err)
	}
}

// TestStamped: Stamped of a written value and the version WriteAtomic
// answered is what Get returns for the entity: the same properties
// (tablecodec.SameEntity; not byte equality, since Azurite returns the
// properties in another order than written) and exactly the same ETag and
// Timestamp (the service's Timestamp is the time its ETag names). Entities Upsert wrote with nemo's stamps
// and then rewrote through WriteAtomic read with the service's stamps.
func TestStamped(t *testing.T) {
	s := newAzurite(t)
	ks := newTable(t, s, "stamped")
	ctx := context.Background()
	when := time.Date(2024, 5, 6, 7, 8, 9, 123456700, time.UTC)
	k1, k2 := tablecodec.EncodeKey("p", "one"), tablecodec.EncodeKey("p", "two")
	v1 := entity("p", "one",
		tablecodec.Property{Name: "Str", Type: tablecodec.EdmString, Value: "x"},
		tablecodec.Property{Name: "Dbl", Type: tablecodec.EdmDouble, Value: 2.0},
		tablecodec.Property{Name: "I64", Type: tablecodec.EdmInt64, Value: int64(-7)},
		tablecodec.Property{Name: "When", Type: tablecodec.EdmDateTime, Value: when},
	).Value
	// The second carries nemo's stamps, written first by Upsert (so the
	// memo remembers them) and then by WriteAtomic.
	e2 := decode(t, entity("p", "two", tablecodec.Property{Name: "A", Type: tablecodec.EdmBoolean, Value: true}).Value)
	e2.Timestamp = when
	e2.ETag = datetimeETag(tablecodec.Ticks(when))
	v2 := tablecodec.EncodeEntity(e2)
	if _, err := s.Upsert(ctx, ks, []adapters.Write{{Key: k2, Value: v2}}); err != nil {
		t.Fatal(err)
	}
	if recs, err := s.Get(ctx, ks, [][]byte{k2}); err != nil || decode(t, recs[0].Value).ETag != e2.ETag {
		t.Fatalf("Upsert's stamps not restored: %v", err)
	}
	vers, err := s.WriteAtomic(ctx, ks, []adapters.Mutation{
		atomictest.Upsert(k1, v1, adapters.Expect{Kind: adapters.ExpectAbsent}),
		atomictest.Upsert(k2, v2, adapters.Expect{}),
	})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := s.Get(ctx, ks, [][]byte{k1, k2})
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range [][]byte{v1, v2} {
		st, err := s.Stamped(v, vers[i])
		if err != nil {
			t.Fatal(err)
		}
		es, eg := decode(t, st), decode(t, recs[i].Value)
		if !tablecodec.SameEntity(st, recs[i].Value) || es.ETag != eg.ETag || !es.Timestamp.Equal(eg.Timestamp) || es.ETag != string(vers[i]) {
			t.Errorf("entity %d: Stamped\n%+v\nGet\n%+v", i, es, eg)
		}
		if !tablecodec.SameEntity(st, v) {
			t.Errorf("entity %d: Stamped changed the properties", i)
		}
	}
	if _, err := s.Stamped(v1, `"0x8D"`); !errors.Is(err, adapters.ErrInvalid) {
		t.Fatalf("Stamped with an ETag without a time: %v", err)
	}
	if _, err := s.Stamped([]byte("junk"), vers[0]); !errors.Is(err, adapters.ErrInvalid) {
		t.Fatalf("Stamped of junk: %v", err)
	}
}
