package lease

import (
	"errors"
	"testing"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
)

// FuzzDecode feeds arbitrary stored values to both codecs' Decode: a
// lease record lives in the user's own store, where anyone with access
// can rewrite it. Decode must not panic, must refuse with ErrBadRecord,
// and the epoch of a record it accepts must survive the manager's next
// write of it.
func FuzzDecode(f *testing.F) {
	ds := dscodec.Partition{Project: "p", Database: "db", Namespace: "ns"}.Keyspace()
	exp := time.Date(2031, 2, 3, 4, 5, 6, 789000000, time.UTC)
	for _, r := range []Record{{Holder: "node-1", Epoch: 7, Expiry: exp}, {Epoch: 1 << 40, Expiry: exp}} {
		for _, c := range []struct {
			codec Codec
			ks    string
		}{{AzTableCodec(), "Orders"}, {DatastoreCodec(), string(ds)}} {
			b, err := c.codec.Encode(adapters.Keyspace(c.ks), r)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, c := range []struct {
			name  string
			codec Codec
			ks    string
		}{{"azure", AzTableCodec(), "Orders"}, {"datastore", DatastoreCodec(), string(ds)}} {
			r, err := c.codec.Decode(b)
			if err != nil {
				if !errors.Is(err, ErrBadRecord) {
					t.Fatalf("%s: Decode error %v does not wrap ErrBadRecord", c.name, err)
				}
				continue
			}
			// A manager that reads a record writes its own holder with
			// the epoch it read (or the next) and an expiry of its own:
			// that must encode (an accepted epoch fits the store's
			// integer) and read back.
			w := Record{Holder: "node-2", Epoch: r.Epoch, Expiry: exp}
			again, err := c.codec.Encode(adapters.Keyspace(c.ks), w)
			if err != nil {
				t.Fatalf("%s: %+v decoded but does not encode: %v", c.name, r, err)
			}
			back, err := c.codec.Decode(again)
			if err != nil || back.Holder != w.Holder || back.Epoch != w.Epoch || !back.Expiry.Equal(w.Expiry) {
				t.Fatalf("%s: %+v re-encoded decodes to %+v, %v", c.name, w, back, err)
			}
		}
	})
}
