package datastore

import (
	"cmp"
	"regexp"
	"strconv"
	"strings"

	"cloud.google.com/go/datastore/apiv1/datastorepb"

	"github.com/nemocache/nemo/adapters/datastore/dscodec"
)

// Datastore's limits.
const (
	maxLookupKeys   = 1000
	maxMutations    = 500
	maxPathDepth    = 100
	maxIndexedBytes = 1500
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
// returns it with its partition filled in, and the partition. The messages
// are the emulators' (both agree on keys).
func normKey(project, database string, k *datastorepb.Key) (*datastorepb.Key, dscodec.Partition, error) {
	if k == nil {
		return nil, dscodec.Partition{}, invalid("A key is required.")
	}
	pid := k.GetPartitionId()
	if (pid.GetProjectId() != "" && pid.GetProjectId() != project) || (pid.GetDatabaseId() != "" && pid.GetDatabaseId() != database) {
		other := dscodec.Partition{Project: cmp.Or(pid.GetProjectId(), project), Database: cmp.Or(pid.GetDatabaseId(), database)}
		return nil, dscodec.Partition{}, invalid("mismatched databases within request: %s vs. %s",
			legacyDatabase(dscodec.Partition{Project: project, Database: database}), legacyDatabase(other))
	}
	if err := checkPathLength(k); err != nil {
		return nil, dscodec.Partition{}, err
	}
	if err := checkNamespace(pid.GetNamespaceId(), false); err != nil {
		return nil, dscodec.Partition{}, err
	}
	p := dscodec.Partition{Project: project, Database: database, Namespace: pid.GetNamespaceId()}
	return &datastorepb.Key{PartitionId: &datastorepb.PartitionId{ProjectId: project, DatabaseId: database, NamespaceId: p.Namespace}, Path: k.GetPath()}, p, nil
}

// legacyDatabase spells a project and database as the service's messages
// about mismatched keys do: <unknown!>~project, with #database unless it
// is the default one.
func legacyDatabase(p dscodec.Partition) string {
	s := "<unknown!>~" + p.Project
	if p.Database != "" {
		s += "#" + p.Database
	}
	return s
}

// databaseName is a project and database as Firestore names them:
// projects/p/databases/(default).
func databaseName(p dscodec.Partition) string {
	return "projects/" + p.Project + "/databases/" + cmp.Or(p.Database, "(default)")
}

func checkPathLength(k *datastorepb.Key) error {
	if len(k.GetPath()) == 0 {
		return invalid("Key path is empty.")
	}
	if len(k.GetPath()) > maxPathDepth {
		return invalid("Key path is too long. Cannot exceed %d elements.", maxPathDepth)
	}
	return nil
}

// pathString renders a path as the service's messages do: [A: a, B: 5, C: ]
// (an incomplete element shows nothing after its kind).
func pathString(path []*datastorepb.Key_PathElement) string {
	parts := make([]string, len(path))
	for i, e := range path {
		id := ""
		switch x := e.GetIdType().(type) {
		case *datastorepb.Key_PathElement_Name:
			id = x.Name
		case *datastorepb.Key_PathElement_Id:
			if x.Id != 0 {
				id = strconv.FormatInt(x.Id, 10)
			}
		}
		parts[i] = e.GetKind() + ": " + id
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func incomplete(k *datastorepb.Key) bool {
	last := k.GetPath()[len(k.GetPath())-1]
	return last.GetId() == 0 && last.GetName() == ""
}

// checkPath validates every element, with the emulators' messages; the
// last may be incomplete when allowIncomplete. Reserved kinds and names
// (__x__) are refused for writes only: a read of one finds nothing, as on
// the emulators. Negative ids are taken, as the emulators take them.
func checkPath(k *datastorepb.Key, allowIncomplete, write bool) error {
	if err := checkPathLength(k); err != nil {
		return err
	}
	for i, e := range k.GetPath() {
		if e.GetKind() == "" {
			return invalid("The kind is the empty string.")
		}
		if len(e.GetKind()) > maxNameBytes {
			return invalid("The kind is longer than %d bytes.", maxNameBytes)
		}
		if write && reserved.MatchString(e.GetKind()) {
			return invalid("The kind %q is reserved.", e.GetKind())
		}
		name, named := e.GetIdType().(*datastorepb.Key_PathElement_Name)
		if named && name.Name == "" {
			return invalid("The key path element name is the empty string.")
		}
		if len(e.GetName()) > maxNameBytes {
			return invalid("The key path element name is longer than %d bytes.", maxNameBytes)
		}
		if write && reserved.MatchString(e.GetName()) {
			return invalid("The key path element name %q is reserved.", e.GetName())
		}
		if id, ok := e.GetIdType().(*datastorepb.Key_PathElement_Id); ok && id.Id == 0 {
			// Set to 0, not left unset (incomplete).
			return invalid("Key path id is invalid. Must not be zero.")
		}
		if !named && e.GetId() == 0 && (i < len(k.GetPath())-1 || !allowIncomplete) {
			return invalid("Key path element must not be incomplete: %s", pathString(k.GetPath()))
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
