package lease

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
)

// Codec says where the lease of a keyspace lives and how its record is
// spelled in the store.
type Codec interface {
	// Keyspace is the keyspace holding the lease of ks; "" when ks
	// cannot be leased with this codec.
	Keyspace(ks adapters.Keyspace) adapters.Keyspace
	// Key is the key of the lease of ks in Keyspace(ks); nil when ks
	// cannot be leased with this codec.
	Key(ks adapters.Keyspace) []byte
	// Encode is the value of the lease record of ks. (It takes ks because
	// an Azure entity repeats its keys in its value.)
	Encode(ks adapters.Keyspace, r Record) ([]byte, error)
	// Decode inverts Encode.
	Decode(b []byte) (Record, error)
}

// ErrBadRecord: a stored value is not a lease record.
var ErrBadRecord = errors.New("lease: not a lease record")

// Property names of a lease record (Azure and Datastore).
const (
	propHolder = "Holder"
	propEpoch  = "Epoch"
	propExpiry = "Expiry"
)

// --- Azure Table ---

// Azure lease layout: the reserved table LeaseTable, partition
// LeasePartition, one entity per table whose RowKey is the lower-cased
// table name (Azure table names are case-insensitive).
const (
	LeaseTable     = "nemoleases"
	LeasePartition = "lease"
)

type azCodec struct{}

// AzTableCodec keeps the leases of an Azure account's tables in the table
// LeaseTable (created on first use).
func AzTableCodec() Codec { return azCodec{} }

func (azCodec) leasable(ks adapters.Keyspace) bool {
	return ks != "" && ks != tablecodec.TablesKeyspace && !strings.EqualFold(string(ks), LeaseTable)
}

func (c azCodec) Keyspace(ks adapters.Keyspace) adapters.Keyspace {
	if !c.leasable(ks) {
		return ""
	}
	return LeaseTable
}

func (c azCodec) Key(ks adapters.Keyspace) []byte {
	if !c.leasable(ks) {
		return nil
	}
	return tablecodec.EncodeKey(LeasePartition, strings.ToLower(string(ks)))
}

func (azCodec) Encode(ks adapters.Keyspace, r Record) ([]byte, error) {
	if r.Epoch > 1<<63-1 {
		return nil, fmt.Errorf("lease: epoch %d does not fit an Int64", r.Epoch)
	}
	e := &tablecodec.Entity{PartitionKey: LeasePartition, RowKey: strings.ToLower(string(ks)), Props: []tablecodec.Property{
		{Name: propHolder, Type: tablecodec.EdmString, Value: r.Holder},
		{Name: propEpoch, Type: tablecodec.EdmInt64, Value: int64(r.Epoch)},
		{Name: propExpiry, Type: tablecodec.EdmDateTime, Value: tablecodec.TruncateTicks(r.Expiry)},
	}}
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	return tablecodec.EncodeEntity(e), nil
}

func (azCodec) Decode(b []byte) (Record, error) {
	e, err := tablecodec.DecodeEntity(b)
	if err != nil {
		return Record{}, fmt.Errorf("%w: %w", ErrBadRecord, err)
	}
	var r Record
	p, ok := e.Get(propHolder)
	if !ok || p.Type != tablecodec.EdmString {
		return Record{}, fmt.Errorf("%w: no string %s", ErrBadRecord, propHolder)
	}
	r.Holder = p.Value.(string)
	p, ok = e.Get(propEpoch)
	var epoch int64
	switch {
	case ok && p.Type == tablecodec.EdmInt64:
		epoch = p.Value.(int64)
	case ok && p.Type == tablecodec.EdmInt32:
		epoch = int64(p.Value.(int32))
	default:
		return Record{}, fmt.Errorf("%w: no integer %s", ErrBadRecord, propEpoch)
	}
	if epoch < 0 {
		return Record{}, fmt.Errorf("%w: negative %s %d", ErrBadRecord, propEpoch, epoch)
	}
	r.Epoch = uint64(epoch)
	if p, ok := e.Get(propExpiry); ok && p.Type == tablecodec.EdmDateTime {
		r.Expiry = p.Value.(time.Time)
	}
	return r, nil
}

// --- Datastore ---

// Datastore lease layout: kind LeaseKind in the default namespace of the
// partition's project and database, one entity per namespace, named after
// it; the default namespace ("", not a legal name) is DefaultNamespaceName,
// which no namespace can be (namespaces match [0-9A-Za-z._-]*).
const (
	LeaseKind            = "NemoLease"
	DefaultNamespaceName = "(default)"
)

type dsCodec struct{}

// DatastoreCodec keeps the lease of a Datastore partition in the default
// namespace of its project and database.
func DatastoreCodec() Codec { return dsCodec{} }

func (dsCodec) Keyspace(ks adapters.Keyspace) adapters.Keyspace {
	p, err := dscodec.ParseKeyspace(ks)
	if err != nil {
		return ""
	}
	p.Namespace = ""
	return p.Keyspace()
}

func (dsCodec) Key(ks adapters.Keyspace) []byte {
	p, err := dscodec.ParseKeyspace(ks)
	if err != nil {
		return nil
	}
	name := p.Namespace
	if name == "" {
		name = DefaultNamespaceName
	}
	k, err := dscodec.EncodePath([]*datastorepb.Key_PathElement{{Kind: LeaseKind, IdType: &datastorepb.Key_PathElement_Name{Name: name}}})
	if err != nil {
		return nil
	}
	return k
}

func (dsCodec) Encode(_ adapters.Keyspace, r Record) ([]byte, error) {
	if r.Epoch > 1<<63-1 {
		return nil, fmt.Errorf("lease: epoch %d does not fit an integer", r.Epoch)
	}
	e := &datastorepb.Entity{Properties: map[string]*datastorepb.Value{
		propHolder: {ValueType: &datastorepb.Value_StringValue{StringValue: r.Holder}, ExcludeFromIndexes: true},
		propEpoch:  {ValueType: &datastorepb.Value_IntegerValue{IntegerValue: int64(r.Epoch)}, ExcludeFromIndexes: true},
		propExpiry: {ValueType: &datastorepb.Value_TimestampValue{TimestampValue: timestamppb.New(r.Expiry.Truncate(time.Microsecond))}, ExcludeFromIndexes: true},
	}}
	return dscodec.EncodeValue(&datastorepb.EntityResult{Entity: e})
}

func (dsCodec) Decode(b []byte) (Record, error) {
	er, err := dscodec.DecodeValue(b)
	if err != nil {
		return Record{}, fmt.Errorf("%w: %w", ErrBadRecord, err)
	}
	props := er.Entity.GetProperties()
	h, ok := props[propHolder].GetValueType().(*datastorepb.Value_StringValue)
	if !ok {
		return Record{}, fmt.Errorf("%w: no string %s", ErrBadRecord, propHolder)
	}
	ep, ok := props[propEpoch].GetValueType().(*datastorepb.Value_IntegerValue)
	if !ok || ep.IntegerValue < 0 {
		return Record{}, fmt.Errorf("%w: no non-negative integer %s", ErrBadRecord, propEpoch)
	}
	r := Record{Holder: h.StringValue, Epoch: uint64(ep.IntegerValue)}
	if ts := props[propExpiry].GetTimestampValue(); ts != nil {
		r.Expiry = ts.AsTime()
	}
	return r, nil
}
