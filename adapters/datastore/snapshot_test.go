package datastore

import (
	"context"
	"errors"
	"testing"

	"cloud.google.com/go/datastore/apiv1/datastorepb"

	"github.com/nemocache/nemo/adapters"
)

// TestSnapshot: reads through a snapshot see the database as of its first
// read, in front of both Datastore backends: a write made after it is not
// seen, by point reads or (Firestore) by a key range read, while a plain
// read sees it. The legacy emulator reads no key range in a transaction:
// GetRange says so with errors.ErrUnsupported, and the snapshot's point
// reads go on; and it aborts a read of what was written since (not seen,
// either way).
func TestSnapshot(t *testing.T) {
	for _, b := range dsBackends() {
		t.Run(b.name, func(t *testing.T) {
			s, p := b.open(t, Options{})
			ctx := context.Background()
			ks := p.Keyspace()
			a := record(t, p, []*datastorepb.Key_PathElement{nameEl("K", "a")}, 1)
			bb := record(t, p, []*datastorepb.Key_PathElement{nameEl("K", "b")}, 1)
			if _, err := s.Upsert(ctx, ks, adapters.Puts([]adapters.Record{a, bb})); err != nil {
				t.Fatal(err)
			}
			snap, err := s.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			defer snap.Close()
			recs, err := snap.Get(ctx, ks, [][]byte{a.Key})
			if err != nil || propV(t, recs[0].Value) != 1 {
				t.Fatalf("first snapshot read: %+v %v", recs, err)
			}
			// A transfer after the snapshot's first read.
			a2 := record(t, p, []*datastorepb.Key_PathElement{nameEl("K", "a")}, 0)
			b2 := record(t, p, []*datastorepb.Key_PathElement{nameEl("K", "b")}, 2)
			c := record(t, p, []*datastorepb.Key_PathElement{nameEl("K", "c")}, 7)
			if _, err := s.Upsert(ctx, ks, adapters.Puts([]adapters.Record{a2, b2, c})); err != nil {
				t.Fatal(err)
			}
			recs, err = snap.Get(ctx, ks, [][]byte{a.Key})
			if err != nil || propV(t, recs[0].Value) != 1 {
				t.Fatalf("snapshot read of a after the write: %+v %v", recs, err)
			}
			recs, err = snap.Get(ctx, ks, [][]byte{bb.Key, c.Key})
			switch {
			case b.name == "datastore-emulator" && errors.Is(err, adapters.ErrAborted):
				// The legacy emulator aborts a transaction that reads
				// an entity written since it began.
				if code, _, _ := adapters.ServiceStatusOf(err); code != "Aborted" {
					t.Fatalf("snapshot read after the write: %v", err)
				}
			case err != nil || propV(t, recs[0].Value) != 1 || recs[1].Value != nil:
				t.Fatalf("snapshot read after the write: %+v %v", recs, err)
			}
			got, more, err := snap.GetRange(ctx, ks, nil, nil, 0)
			switch b.name {
			case "datastore-emulator":
				if !errors.Is(err, errors.ErrUnsupported) || !s.snapRangesOutside.Load() {
					t.Fatalf("a key range read in a legacy read-only transaction: %v", err)
				}
				if _, err := snap.Get(ctx, ks, [][]byte{a.Key}); err != nil {
					t.Fatalf("a point read after the refused range read: %v", err)
				}
			default:
				if err != nil || more || len(got) != 2 || propV(t, got[0].Value)+propV(t, got[1].Value) != 2 {
					t.Fatalf("snapshot range read: %d records, more %v, %v", len(got), more, err)
				}
			}
			latest, err := s.Get(ctx, ks, [][]byte{a.Key, c.Key})
			if err != nil || propV(t, latest[0].Value) != 0 || latest[1].Value == nil {
				t.Fatalf("plain read after the write: %+v %v", latest, err)
			}
			snap.Close()
			if _, err := snap.Get(ctx, ks, [][]byte{a.Key}); !errors.Is(err, adapters.ErrClosed) {
				t.Fatalf("a read after Close: %v", err)
			}
		})
	}
}
