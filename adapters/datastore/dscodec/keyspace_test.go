package dscodec

import (
	"errors"
	"testing"

	"github.com/nemocache/nemo/adapters"
)

func TestKeyspaceRoundTrip(t *testing.T) {
	for _, p := range []Partition{
		{Project: "p"},
		{Project: "my-proj", Database: "db-1", Namespace: "ns"},
		{Project: "p", Namespace: "a/b%c"},
		{Project: "p", Database: "", Namespace: "é"},
	} {
		ks := p.Keyspace()
		got, err := ParseKeyspace(ks)
		if err != nil || got != p {
			t.Errorf("%+v -> %q -> %+v, %v", p, ks, got, err)
		}
	}
	if a, b := (Partition{Project: "p", Namespace: "x/y"}).Keyspace(), (Partition{Project: "p", Database: "x", Namespace: "y"}).Keyspace(); a == b {
		t.Errorf("distinct partitions share keyspace %q", a)
	}
	for _, ks := range []adapters.Keyspace{"table1", "datastore/", "datastore/p/d", "datastore//d/n", "datastore/p/d/n/x", "datastore/p/%zz/n", "datastore/p/%41/n"} {
		if _, err := ParseKeyspace(ks); !errors.Is(err, ErrKeyspace) {
			t.Errorf("ParseKeyspace(%q): %v", ks, err)
		}
	}
}
