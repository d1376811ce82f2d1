package aztable

import (
	"fmt"
	"strings"
	"time"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
)

// Azure lease layout: the reserved table LeaseTable, partition
// LeasePartition, one entity per table whose RowKey is the lower-cased
// table name (Azure table names are case-insensitive), with the properties
// Holder (String), Epoch (Int64), Expiry (DateTime) and Addr (String; a
// record written before nemo kept the holder's peer address has none, and
// reads as "").
const (
	LeaseTable     = "nemoleases"
	LeasePartition = "lease"
)

// Property names of a lease entity.
const (
	leaseHolder = "Holder"
	leaseEpoch  = "Epoch"
	leaseExpiry = "Expiry"
	leaseAddr   = "Addr"
)

// LeaseCodec keeps the leases of an Azure account's tables in the table
// LeaseTable (the lease manager creates it on first use). Its zero value
// is ready; it is the lease codec of txn/lease for this backend.
type LeaseCodec struct{}

func (LeaseCodec) leasable(ks adapters.Keyspace) bool {
	return ks != "" && ks != tablecodec.TablesKeyspace && !strings.EqualFold(string(ks), LeaseTable) && !strings.EqualFold(string(ks), LogTable)
}

// Keyspace is LeaseTable, or "" for a keyspace that has no lease (the
// table catalog, the lease table itself).
func (c LeaseCodec) Keyspace(ks adapters.Keyspace) adapters.Keyspace {
	if !c.leasable(ks) {
		return ""
	}
	return LeaseTable
}

// Key is the key of table ks's lease entity; nil when Keyspace(ks) is "".
func (c LeaseCodec) Key(ks adapters.Keyspace) []byte {
	if !c.leasable(ks) {
		return nil
	}
	return tablecodec.EncodeKey(LeasePartition, strings.ToLower(string(ks)))
}

// Encode is the lease entity of table ks holding r (an entity repeats its
// keys in its value).
func (LeaseCodec) Encode(ks adapters.Keyspace, r adapters.LeaseRecord) ([]byte, error) {
	if r.Epoch > 1<<63-1 {
		return nil, fmt.Errorf("aztable: lease epoch %d does not fit an Int64", r.Epoch)
	}
	e := &tablecodec.Entity{PartitionKey: LeasePartition, RowKey: strings.ToLower(string(ks)), Props: []tablecodec.Property{
		{Name: leaseHolder, Type: tablecodec.EdmString, Value: r.Holder},
		{Name: leaseEpoch, Type: tablecodec.EdmInt64, Value: int64(r.Epoch)},
		{Name: leaseExpiry, Type: tablecodec.EdmDateTime, Value: tablecodec.TruncateTicks(r.Expiry)},
		{Name: leaseAddr, Type: tablecodec.EdmString, Value: r.Addr},
	}}
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("aztable: lease: %w", err)
	}
	return tablecodec.EncodeEntity(e), nil
}

// Decode reads a lease entity; a value that is not one is an
// adapters.ErrBadLeaseRecord.
func (LeaseCodec) Decode(b []byte) (adapters.LeaseRecord, error) {
	e, err := tablecodec.DecodeEntity(b)
	if err != nil {
		return adapters.LeaseRecord{}, fmt.Errorf("%w: %w", adapters.ErrBadLeaseRecord, err)
	}
	var r adapters.LeaseRecord
	p, ok := e.Get(leaseHolder)
	if !ok || p.Type != tablecodec.EdmString {
		return adapters.LeaseRecord{}, fmt.Errorf("%w: no string %s", adapters.ErrBadLeaseRecord, leaseHolder)
	}
	r.Holder = p.Value.(string)
	if r.Epoch, err = uintProp(e, leaseEpoch, adapters.ErrBadLeaseRecord); err != nil {
		return adapters.LeaseRecord{}, err
	}
	if p, ok := e.Get(leaseExpiry); ok && p.Type == tablecodec.EdmDateTime {
		r.Expiry = p.Value.(time.Time)
	}
	if p, ok := e.Get(leaseAddr); ok {
		if p.Type != tablecodec.EdmString {
			return adapters.LeaseRecord{}, fmt.Errorf("%w: %s is not a string", adapters.ErrBadLeaseRecord, leaseAddr)
		}
		r.Addr = p.Value.(string)
	}
	return r, nil
}
