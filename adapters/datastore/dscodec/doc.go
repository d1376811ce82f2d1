// Package dscodec holds nemo's codecs for Google Cloud Datastore: the
// keyspace spelling of a partition (project, database, namespace), an
// order-preserving key codec whose bytes.Compare order equals Datastore's key
// order exactly (path element by element; within an element the kind by
// UTF-8 bytes, then every numeric id before every name, ids numerically,
// names by UTF-8 bytes; a parent before all its descendants), and the value
// codec (a marshalled datastorepb.EntityResult carrying the entity with its
// version and create/update times), with an edit and a read of an encoded
// value's version that do not decode the entity (WithVersion, ValueVersion:
// the write path's).
// It imports only the datastorepb types
// and adapters' key/value types, so both the backend adapter and the
// frontend share it.
package dscodec
