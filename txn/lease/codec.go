package lease

import "github.com/nemocache/nemo/adapters"

// Codec says where the lease of a keyspace lives and how its record is
// spelled in the store. Each remote backend's adapter provides one
// (aztable.LeaseCodec, datastore.LeaseCodec): this package knows no
// backend's spelling.
type Codec interface {
	// Keyspace is the keyspace holding the lease of ks; "" when ks
	// cannot be leased with this codec.
	Keyspace(ks adapters.Keyspace) adapters.Keyspace
	// Key is the key of the lease of ks in Keyspace(ks); nil when ks
	// cannot be leased with this codec.
	Key(ks adapters.Keyspace) []byte
	// Encode is the value of the lease record of ks. (It takes ks because
	// an Azure entity repeats its keys in its value.)
	Encode(ks adapters.Keyspace, r adapters.LeaseRecord) ([]byte, error)
	// Decode inverts Encode; a value that is not a lease record is an
	// adapters.ErrBadLeaseRecord.
	Decode(b []byte) (adapters.LeaseRecord, error)
}
