package datastore

import (
	"regexp"

	"cloud.google.com/go/datastore/apiv1/datastorepb"

	"github.com/nemocache/nemo/adapters/datastore/dscodec"
)

// Datastore's limits.
const (
	maxLookupKeys   = 1000
	maxMutations    = 500
	maxPathDepth    = 100
	maxIndexedBytes = 1500
	maxEntityBytes  = 1048572
	maxNameBytes    = 1500 // kinds, key names, property names
)

var (
	reserved  = regexp.MustCompile(`^__.*__$`)
	namespace = regexp.MustCompile(`^[0-9A-Za-z._-]{0,100}$`)
)

// checkNamespace enforces Datastore's namespace rules; reserved names
// (__x__) are refused for writes only.
func checkNamespace(ns string, write bool) error {
	if !namespace.MatchString(ns) {
		return invalid("Illegal string %q in namespace id.", ns)
	}
	if write && reserved.MatchString(ns) {
		return invalid("The namespace id %q is reserved.", ns)
	}
	return nil
}

// --- keys and partitions ---

// normKey checks k belongs to the request's project and database and
// returns it with its partition filled in, and the partition.
func normKey(project, database string, k *datastorepb.Key) (*datastorepb.Key, dscodec.Partition, error) {
	if k == nil {
		return nil, dscodec.Partition{}, invalid("A key is required.")
	}
	pid := k.GetPartitionId()
	if pid.GetProjectId() != "" && pid.GetProjectId() != project {
		return nil, dscodec.Partition{}, invalid("mismatched projects: the key's project %q is not the request's %q", pid.GetProjectId(), project)
	}
	if pid.GetDatabaseId() != "" && pid.GetDatabaseId() != database {
		return nil, dscodec.Partition{}, invalid("mismatched databases: the key's database %q is not the request's %q", pid.GetDatabaseId(), database)
	}
	if len(k.GetPath()) == 0 {
		return nil, dscodec.Partition{}, invalid("The key path must not be empty.")
	}
	if len(k.GetPath()) > maxPathDepth {
		return nil, dscodec.Partition{}, invalid("The key path has more than %d elements.", maxPathDepth)
	}
	if err := checkNamespace(pid.GetNamespaceId(), false); err != nil {
		return nil, dscodec.Partition{}, err
	}
	p := dscodec.Partition{Project: project, Database: database, Namespace: pid.GetNamespaceId()}
	return &datastorepb.Key{PartitionId: &datastorepb.PartitionId{ProjectId: project, DatabaseId: database, NamespaceId: p.Namespace}, Path: k.GetPath()}, p, nil
}

func incomplete(k *datastorepb.Key) bool {
	last := k.GetPath()[len(k.GetPath())-1]
	return last.GetId() == 0 && last.GetName() == ""
}

// checkPath validates every element; the last may be incomplete when
// allowIncomplete.
func checkPath(k *datastorepb.Key, allowIncomplete, write bool) error {
	for i, e := range k.GetPath() {
		if e.GetKind() == "" {
			return invalid("The key path element kind must not be empty.")
		}
		if len(e.GetKind()) > maxNameBytes {
			return invalid("The kind is longer than %d bytes.", maxNameBytes)
		}
		if len(e.GetName()) > maxNameBytes {
			return invalid("The key path element name is longer than %d bytes.", maxNameBytes)
		}
		if write && reserved.MatchString(e.GetKind()) {
			return invalid("The key path element kind %q is reserved.", e.GetKind())
		}
		if reserved.MatchString(e.GetName()) {
			return invalid("The key path element name %q is reserved.", e.GetName())
		}
		if e.GetId() < 0 {
			return invalid("The key path element id must be positive.")
		}
		if e.GetId() == 0 && e.GetName() == "" && (i < len(k.GetPath())-1 || !allowIncomplete) {
			return invalid("The key path is incomplete.")
		}
	}
	return nil
}

// encode validates k for a read (complete, any kind) and encodes it.
func encodeRead(project, database string, k *datastorepb.Key) (*datastorepb.Key, dscodec.Partition, []byte, error) {
	nk, p, err := normKey(project, database, k)
	if err != nil {
		return nil, p, nil, err
	}
	if err := checkPath(nk, false, false); err != nil {
		return nil, p, nil, err
	}
	enc, err := dscodec.EncodeKey(nk)
	if err != nil {
		return nil, p, nil, invalid("invalid key: %v", err)
	}
	return nk, p, enc, nil
}
