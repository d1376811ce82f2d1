package dscodec

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/nemocache/nemo/adapters"
)

// KeyspacePrefix starts every Datastore partition keyspace. Azure table
// names are alphanumeric, so the two dialects never collide in one store.
const KeyspacePrefix = "datastore/"

// Partition is one Datastore partition: the unit nemo maps to a keyspace.
// An empty Database is the default database, an empty Namespace the default
// namespace.
type Partition struct {
	Project, Database, Namespace string
}

// ErrKeyspace: a keyspace name is not a Datastore partition.
var ErrKeyspace = errors.New("dscodec: not a datastore keyspace")

// Keyspace spells p as "datastore/<project>/<database>/<namespace>", each
// part path-escaped (url.PathEscape also escapes '/'), so the spelling is
// unambiguous and ParseKeyspace inverts it exactly.
func (p Partition) Keyspace() adapters.Keyspace {
	return adapters.Keyspace(KeyspacePrefix + url.PathEscape(p.Project) + "/" +
		url.PathEscape(p.Database) + "/" + url.PathEscape(p.Namespace))
}

// ParseKeyspace inverts Partition.Keyspace.
func ParseKeyspace(ks adapters.Keyspace) (Partition, error) {
	rest, ok := strings.CutPrefix(string(ks), KeyspacePrefix)
	if !ok {
		return Partition{}, fmt.Errorf("%w: %q", ErrKeyspace, ks)
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || parts[0] == "" {
		return Partition{}, fmt.Errorf("%w: %q", ErrKeyspace, ks)
	}
	var p Partition
	for i, dst := range []*string{&p.Project, &p.Database, &p.Namespace} {
		s, err := url.PathUnescape(parts[i])
		if err != nil {
			return Partition{}, fmt.Errorf("%w: %q: %w", ErrKeyspace, ks, err)
		}
		*dst = s
	}
	if p.Keyspace() != ks { // non-canonical escaping would alias a partition
		return Partition{}, fmt.Errorf("%w: %q is not canonical", ErrKeyspace, ks)
	}
	return p, nil
}
