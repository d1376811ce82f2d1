package datastore

import (
	"bytes"
	"context"
	"testing"

	"cloud.google.com/go/datastore/apiv1/datastorepb"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
)

// TestReadsAnswersOverFourMiB: a Lookup and a query whose answers pass
// gRPC's default 4 MiB limit on a received message (six entities of 900
// KiB: a backend log's entries are this big) are read whole. With the
// default limit both failed with RESOURCE_EXHAUSTED ("received message
// larger than max").
func TestReadsAnswersOverFourMiB(t *testing.T) {
	for _, b := range dsBackends() {
		t.Run(b.name, func(t *testing.T) {
			s, p := b.open(t, Options{})
			ctx := context.Background()
			ks := p.Keyspace()
			var keys [][]byte
			for i := range 6 {
				path := []*datastorepb.Key_PathElement{idEl("Big", int64(i+1))}
				k, err := dscodec.EncodePath(path)
				if err != nil {
					t.Fatal(err)
				}
				v, err := dscodec.EncodeValue(&datastorepb.EntityResult{Entity: &datastorepb.Entity{
					Key: keyOf(p, path),
					Properties: map[string]*datastorepb.Value{"b": {
						ValueType:          &datastorepb.Value_BlobValue{BlobValue: bytes.Repeat([]byte{byte(i)}, 900<<10)},
						ExcludeFromIndexes: true,
					}},
				}})
				if err != nil {
					t.Fatal(err)
				}
				// One commit each: the emulators take requests of at
				// most 4 MiB.
				if _, err := s.Upsert(ctx, ks, []adapters.Write{{Key: k, Value: v}}); err != nil {
					t.Fatal(err)
				}
				keys = append(keys, k)
			}
			recs, err := s.Get(ctx, ks, keys)
			if err != nil || len(recs) != 6 || recs[5].Value == nil {
				t.Fatalf("lookup of six 900 KiB entities: %v (%d records)", err, len(recs))
			}
			recs, _, err = s.GetRange(ctx, ks, nil, nil, 0)
			if err != nil || len(recs) != 6 {
				t.Fatalf("query of six 900 KiB entities: %v (%d records)", err, len(recs))
			}
		})
	}
}
