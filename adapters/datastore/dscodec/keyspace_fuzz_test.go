package dscodec

import (
	"errors"
	"testing"

	"github.com/nemocache/nemo/adapters"
)

// FuzzParseKeyspace: ParseKeyspace accepts exactly the keyspaces
// Partition.Keyspace spells (so no two spellings alias one partition),
// refuses the rest with ErrKeyspace, and inverts Keyspace for any
// partition.
func FuzzParseKeyspace(f *testing.F) {
	for _, s := range []string{"datastore/p//", "datastore/my-proj/db-1/ns", "datastore/p//a%2Fb%25c", "datastore/p/x", "datastore//d/n", "other/p//", "datastore/p//%zz"} {
		f.Add(s, "p", "db", "ns")
	}
	f.Fuzz(func(t *testing.T, ks, project, database, namespace string) {
		if p, err := ParseKeyspace(adapters.Keyspace(ks)); err != nil {
			if !errors.Is(err, ErrKeyspace) {
				t.Fatalf("ParseKeyspace(%q): %v does not wrap ErrKeyspace", ks, err)
			}
		} else if p.Keyspace() != adapters.Keyspace(ks) {
			t.Fatalf("ParseKeyspace(%q) = %+v, which spells %q", ks, p, p.Keyspace())
		}
		if project == "" {
			return // a partition always has a project
		}
		p := Partition{Project: project, Database: database, Namespace: namespace}
		back, err := ParseKeyspace(p.Keyspace())
		if err != nil || back != p {
			t.Fatalf("%+v spells %q, which parses to %+v, %v", p, p.Keyspace(), back, err)
		}
	})
}
