package datastore

import (
	"fmt"
	"time"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
)

// Datastore lease layout: kind LeaseKind in the default namespace of the
// partition's project and database, one entity per namespace, named after
// it; the default namespace ("", not a legal name) is DefaultNamespaceName,
// which no namespace can be (namespaces match [0-9A-Za-z._-]*). Its
// properties, none indexed: Holder (string), Epoch (integer), Expiry
// (timestamp) and Addr (string; a record written before nemo kept the
// holder's peer address has none, and reads as "").
const (
	LeaseKind            = "NemoLease"
	DefaultNamespaceName = "(default)"
)

// Property names of a lease entity.
const (
	leaseHolder = "Holder"
	leaseEpoch  = "Epoch"
	leaseExpiry = "Expiry"
	leaseAddr   = "Addr"
)

// LeaseCodec keeps the lease of a Datastore partition in the default
// namespace of its project and database. Its zero value is ready; it is
// the lease codec of txn/lease for this backend.
type LeaseCodec struct{}

// Keyspace is the default namespace of ks's project and database, or ""
// when ks is not a Datastore partition.
func (LeaseCodec) Keyspace(ks adapters.Keyspace) adapters.Keyspace {
	p, err := dscodec.ParseKeyspace(ks)
	if err != nil {
		return ""
	}
	p.Namespace = ""
	return p.Keyspace()
}

// Key is the key of ks's lease entity; nil when Keyspace(ks) is "".
func (LeaseCodec) Key(ks adapters.Keyspace) []byte {
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

// Encode is the value of the lease entity holding r.
func (LeaseCodec) Encode(_ adapters.Keyspace, r adapters.LeaseRecord) ([]byte, error) {
	if r.Epoch > 1<<63-1 {
		return nil, fmt.Errorf("datastore: lease epoch %d does not fit an integer", r.Epoch)
	}
	e := &datastorepb.Entity{Properties: map[string]*datastorepb.Value{
		leaseHolder: {ValueType: &datastorepb.Value_StringValue{StringValue: r.Holder}, ExcludeFromIndexes: true},
		leaseEpoch:  {ValueType: &datastorepb.Value_IntegerValue{IntegerValue: int64(r.Epoch)}, ExcludeFromIndexes: true},
		leaseExpiry: {ValueType: &datastorepb.Value_TimestampValue{TimestampValue: timestamppb.New(r.Expiry.Truncate(time.Microsecond))}, ExcludeFromIndexes: true},
		leaseAddr:   {ValueType: &datastorepb.Value_StringValue{StringValue: r.Addr}, ExcludeFromIndexes: true},
	}}
	return dscodec.EncodeValue(&datastorepb.EntityResult{Entity: e})
}

// Decode reads a lease entity's value; one that is not a lease record is
// an adapters.ErrBadLeaseRecord.
func (LeaseCodec) Decode(b []byte) (adapters.LeaseRecord, error) {
	er, err := dscodec.DecodeValue(b)
	if err != nil {
		return adapters.LeaseRecord{}, fmt.Errorf("%w: %w", adapters.ErrBadLeaseRecord, err)
	}
	props := er.Entity.GetProperties()
	h, ok := props[leaseHolder].GetValueType().(*datastorepb.Value_StringValue)
	if !ok {
		return adapters.LeaseRecord{}, fmt.Errorf("%w: no string %s", adapters.ErrBadLeaseRecord, leaseHolder)
	}
	ep, ok := props[leaseEpoch].GetValueType().(*datastorepb.Value_IntegerValue)
	if !ok || ep.IntegerValue < 0 {
		return adapters.LeaseRecord{}, fmt.Errorf("%w: no non-negative integer %s", adapters.ErrBadLeaseRecord, leaseEpoch)
	}
	r := adapters.LeaseRecord{Holder: h.StringValue, Epoch: uint64(ep.IntegerValue)}
	if ts := props[leaseExpiry].GetTimestampValue(); ts != nil {
		r.Expiry = ts.AsTime()
	}
	if a, ok := props[leaseAddr]; ok {
		s, ok := a.GetValueType().(*datastorepb.Value_StringValue)
		if !ok {
			return adapters.LeaseRecord{}, fmt.Errorf("%w: %s is not a string", adapters.ErrBadLeaseRecord, leaseAddr)
		}
		r.Addr = s.StringValue
	}
	return r, nil
}
