package aztable

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
)

// MaxAtomic is the most mutations one WriteAtomic group may hold: an
// entity group transaction's limit.
const MaxAtomic = MaxBatchOps

var (
	_ adapters.AtomicWriter = (*Store)(nil)
	_ adapters.Stamper      = (*Store)(nil)
)

// WriteAtomic implements adapters.AtomicWriter as one entity group
// transaction. The group must name one PartitionKey, each entity at most
// once, and hold at most MaxAtomic mutations within MaxBatchBytes;
// otherwise it is refused with adapters.ErrInvalid and nothing is sent.
// The operations are those of Upsert and Delete: an upsert is
// insert-or-replace (ExpectAny), insert (ExpectAbsent; 409
// EntityAlreadyExists refuses it) or replace with If-Match: version
// (ExpectVersion; 412 refuses it, 404 too: the entity is absent); a delete
// is a delete with If-Match: version (ExpectVersion) or If-Match *
// (ExpectAny). A delete under ExpectAbsent cannot be expressed in a
// transaction (Azure has no "must not exist" condition on a delete, and a
// transaction names each entity once, so no insert can stand in for the
// check): a group holding one is refused with adapters.ErrInvalid.
//
// The service refuses a whole transaction when one operation fails, and
// names only that one. A refused precondition is returned as a
// *adapters.ConflictError naming that mutation (Exists and Current filled
// by a point read after the refusal, as for Upsert). An ExpectAny delete
// of an absent entity fails the transaction with 404 although its
// precondition holds; it is dropped from the group (the entity stays
// absent) and the rest is submitted again as one transaction, so a group
// costs one transaction plus one per such delete. The SDK pipeline retries
// an attempt that failed in transport: a transaction applied although its
// answer was lost is then refused by its own first application when it
// holds a conditional write (a conflict that may be the write itself),
// and applied again otherwise.
//
// Each upsert's version is the ETag of its operation's response ("" if
// the answer could not be read). The values stored carry the service's
// Timestamp and ETag from then on: WriteAtomic makes the stamp memo
// forget every entity of the group, so a later read returns the service's
// stamps, which Stamped reproduces from the value written and its
// version.
func (s *Store) WriteAtomic(ctx context.Context, ks adapters.Keyspace, ms []adapters.Mutation) ([]adapters.Version, error) {
	if ks == tablecodec.TablesKeyspace {
		return nil, fmt.Errorf("aztable: write_atomic: the table catalog is written through CreateKeyspace and DropKeyspace: %w", adapters.ErrInvalid)
	}
	if len(ms) == 0 {
		return nil, nil
	}
	if len(ms) > MaxAtomic {
		return nil, fmt.Errorf("aztable: write_atomic: %d mutations, a transaction holds at most %d: %w", len(ms), MaxAtomic, adapters.ErrInvalid)
	}
	ops := make([]op, len(ms))
	writes := make([]adapters.Write, len(ms))
	seen := make(map[string]int, len(ms))
	size := 0
	for i, m := range ms {
		writes[i] = m.Write
		o, err := atomicOp(m)
		if err != nil {
			return nil, fmt.Errorf("aztable: write_atomic: mutation %d: %w", i, err)
		}
		o.expect, o.idx = m.Expect, []int{i}
		if i > 0 && o.pk != ops[0].pk {
			return nil, fmt.Errorf("aztable: write_atomic: mutation %d is in partition %q, mutation 0 in %q: %w", i, o.pk, ops[0].pk, adapters.ErrInvalid)
		}
		if j, dup := seen[o.rk]; dup {
			return nil, fmt.Errorf("aztable: write_atomic: mutations %d and %d both name row %q: %w", j, i, o.rk, adapters.ErrInvalid)
		}
		seen[o.rk] = i
		size += len(o.body) + batchOpOverhead
		ops[i] = o
	}
	if size > MaxBatchBytes {
		return nil, fmt.Errorf("aztable: write_atomic: about %d bytes, a transaction holds at most %d: %w", size, MaxBatchBytes, adapters.ErrInvalid)
	}
	// Whatever happens, the entities will not read with nemo's stamps.
	for _, m := range ms {
		s.memo.drop(ks, m.Key)
	}
	vers := make([]adapters.Version, len(ms))
	pending := ops
	for len(pending) > 0 {
		got, failed, err := s.submit(ctx, ks, pending)
		if err == nil {
			for i, o := range pending {
				vers[o.self()] = got[i]
			}
			return vers, nil
		}
		if errors.Is(err, adapters.ErrUnknownOutcome) {
			return nil, err
		}
		if cerr := classify("write_atomic", err); errors.Is(cerr, adapters.ErrUnavailable) || ctx.Err() != nil {
			return nil, cerr
		}
		if failed == nil || failed.index < 0 || failed.index >= len(pending) {
			return nil, classify("write_atomic", err)
		}
		o := pending[failed.index]
		if o.body == nil && o.expect.Kind == adapters.ExpectAny && failed.status == http.StatusNotFound {
			// Deleting an absent entity: nothing to do.
			pending = slices.Delete(slices.Clone(pending), failed.index, failed.index+1)
			continue
		}
		if exists, ok := refusal(o, failed.status, failed.code); ok {
			out := newOutcome(writes)
			out.refused(o, exists, "")
			return nil, out.conflicts(ctx, s, ks)
		}
		return nil, classify("write_atomic", err)
	}
	return vers, nil // every mutation was a delete of an absent entity
}

// atomicOp is mutation m as an operation of an entity group transaction
// (its expectation and index not yet set).
func atomicOp(m adapters.Mutation) (op, error) {
	if err := checkExpect(m.Expect); err != nil {
		return op{}, err
	}
	if m.Check {
		// An entity group transaction has no operation that reads
		// without writing.
		return op{}, fmt.Errorf("a check cannot be part of a transaction: %w", adapters.ErrInvalid)
	}
	if m.Delete {
		if m.Expect.Kind == adapters.ExpectAbsent {
			return op{}, fmt.Errorf("a delete under ExpectAbsent cannot be part of a transaction: %w", adapters.ErrInvalid)
		}
		pk, rk, err := tablecodec.DecodeKey(m.Key)
		if err != nil {
			return op{}, fmt.Errorf("%w: %w", adapters.ErrInvalid, err)
		}
		return op{pk: pk, rk: rk}, nil
	}
	e, body, _, err := entityJSON(m.Key, m.Value)
	if err != nil {
		return op{}, err
	}
	return op{pk: e.PartitionKey, rk: e.RowKey, body: body}, nil
}

// Stamped implements adapters.Stamper: value (an encoded entity) with the
// ETag v and the Timestamp v was derived from, as a Get returns the entity
// after a WriteAtomic of value answered with v (WriteAtomic leaves no
// stamps of nemo's for Get to restore). v must have the service's
// datetime form (W/"datetime'2026-12-02T22%3A58%3A00.1234567Z'"), which
// Azure's and Azurite's ETags have; any other is adapters.ErrInvalid.
func (s *Store) Stamped(value []byte, v adapters.Version) ([]byte, error) {
	ticks, ok := parseDatetimeETag(string(v))
	if !ok {
		return nil, fmt.Errorf("aztable: stamped: ETag %q does not carry a time: %w", v, adapters.ErrInvalid)
	}
	e, err := tablecodec.DecodeEntity(value)
	if err != nil {
		return nil, fmt.Errorf("aztable: stamped: %w: %w", adapters.ErrInvalid, err)
	}
	e.ETag, e.Timestamp = string(v), tablecodec.FromTicks(ticks)
	return tablecodec.EncodeEntity(e), nil
}
