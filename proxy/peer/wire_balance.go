package peer

import (
	"errors"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/nemocache/nemo/adapters"
)

// The rebalance's messages (rebalance.go): a look at how many keyspaces a
// peer owns, and the request that it take one this node handed over.

// statusRequest asks a peer for its status; it has no fields.
type statusRequest struct{}

// statusReply is a peer's status: how many keyspaces it owns, and whether
// it is draining (then it takes none).
type statusReply struct {
	owned    int
	draining bool
}

// takeRequest asks a peer to take a keyspace over (txn.Engine.Acquire).
type takeRequest struct{ ks adapters.Keyspace }

// takeReply answers a takeRequest: nil, or why not.
type takeReply struct{ err *wireError }

const (
	fStatOwned, fStatDraining = 1, 2
	fTakeKeyspace             = 1
	fTakeErr                  = 1
)

func (*statusRequest) marshal() []byte { return nil }

func (r *statusRequest) unmarshal(b []byte) error {
	*r = statusRequest{}
	return fields(b, func(protowire.Number, protowire.Type, uint64, []byte) error { return nil })
}

func (r *statusReply) marshal() []byte {
	b := appendVarint(nil, fStatOwned, uint64(r.owned))
	return appendBool(b, fStatDraining, r.draining)
}

func (r *statusReply) unmarshal(b []byte) error {
	*r = statusReply{}
	return fields(b, func(num protowire.Number, typ protowire.Type, v uint64, _ []byte) error {
		switch num {
		case fStatOwned:
			if v >= maxLimit {
				return errBadField
			}
			r.owned = int(v)
			return want(typ, varintType)
		case fStatDraining:
			r.draining = v != 0
			return want(typ, varintType)
		}
		return nil
	})
}

func (r *takeRequest) marshal() []byte { return appendOpt(nil, fTakeKeyspace, []byte(r.ks)) }

func (r *takeRequest) unmarshal(b []byte) error {
	*r = takeRequest{}
	return fields(b, func(num protowire.Number, typ protowire.Type, _ uint64, bs []byte) error {
		if num == fTakeKeyspace {
			r.ks = adapters.Keyspace(bs)
			return want(typ, bytesType)
		}
		return nil
	})
}

func (r *takeReply) marshal() []byte { return appendErr(nil, fTakeErr, r.err) }

func (r *takeReply) unmarshal(b []byte) error {
	*r = takeReply{}
	return fields(b, func(num protowire.Number, typ protowire.Type, _ uint64, bs []byte) error {
		if num == fTakeErr {
			w, err := unmarshalErr(bs)
			r.err = w
			return errors.Join(want(typ, bytesType), err)
		}
		return nil
	})
}
