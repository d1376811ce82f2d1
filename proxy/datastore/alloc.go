package datastore

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/protobuf/proto"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
	"github.com/nemocache/nemo/txn"
)

// SystemKeyspace holds the LocalAllocator's state. It does not parse as a
// partition, so it never reaches a Datastore backend by accident (the
// adapter refuses it); it is meant for the embedded store.
const SystemKeyspace adapters.Keyspace = "datastore-sys"

const (
	allocBlock = 1000
	idSpace    = 1 << 52 // allocated ids stay below 2^52, exact in JavaScript numbers
	// scatterMul is odd, so c -> c*scatterMul mod 2^52 is a bijection: ids
	// never repeat, yet spread over the id space like Datastore's scattered
	// ids instead of colliding with the small ids people pick by hand.
	scatterMul = 0x9E3779B97F4A7C15 % idSpace
)

// LocalAllocator allocates ids without a backend: a counter per partition
// whose high-water mark is persisted through the engine in blocks of 1000
// (so a restart skips at most a block and never reuses an id), scattered
// over [1, 2^52). Reserved ids are recorded and skipped.
type LocalAllocator struct {
	engine *txn.Engine
	mu     sync.Mutex
	blocks map[adapters.Keyspace]*idBlock
}

type idBlock struct{ next, limit uint64 }

// NewLocalAllocator returns an allocator persisting into SystemKeyspace.
func NewLocalAllocator(engine *txn.Engine) *LocalAllocator {
	return &LocalAllocator{engine: engine, blocks: map[adapters.Keyspace]*idBlock{}}
}

func hwKey(ks adapters.Keyspace) []byte { return append([]byte("hw/"), ks...) }

func reservedKey(ks adapters.Keyspace, id int64) []byte {
	k := append([]byte("rsv/"), ks...)
	return binary.BigEndian.AppendUint64(append(k, '/'), uint64(id))
}

func scatter(c uint64) int64 { return int64((c * scatterMul) % idSpace) }

// counter returns the next counter value for ks, persisting a new block
// when the current one is used up. a.mu is held.
func (a *LocalAllocator) counter(ctx context.Context, ks adapters.Keyspace) (uint64, error) {
	b := a.blocks[ks]
	if b == nil || b.next >= b.limit {
		var hw uint64
		err := a.engine.Run(ctx, false, func(t *txn.Txn) error {
			v, ok, err := t.GetForUpdate(ctx, SystemKeyspace, hwKey(ks))
			if err != nil {
				return err
			}
			hw = 1 // counter 0 would scatter to id 0
			if ok && len(v) == 8 {
				hw = binary.BigEndian.Uint64(v)
			}
			return t.Upsert(ctx, SystemKeyspace, hwKey(ks), binary.BigEndian.AppendUint64(nil, hw+allocBlock))
		})
		if err != nil {
			return 0, fmt.Errorf("id allocator: %w", err)
		}
		b = &idBlock{next: hw, limit: hw + allocBlock}
		a.blocks[ks] = b
	}
	c := b.next
	b.next++
	return c, nil
}

func allocPartition(project, database string, k *datastorepb.Key) dscodec.Partition {
	return dscodec.Partition{Project: project, Database: database, Namespace: k.GetPartitionId().GetNamespaceId()}
}

// AllocateIDs implements IDAllocator.
func (a *LocalAllocator) AllocateIDs(ctx context.Context, project, database string, keys []*datastorepb.Key) ([]*datastorepb.Key, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]*datastorepb.Key, len(keys))
	for i, k := range keys {
		ks := allocPartition(project, database, k).Keyspace()
		for {
			c, err := a.counter(ctx, ks)
			if err != nil {
				return nil, err
			}
			id := scatter(c)
			_, reserved, err := a.engine.Get(ctx, SystemKeyspace, reservedKey(ks, id), txn.ReadLatest)
			if err != nil {
				return nil, fmt.Errorf("id allocator: %w", err)
			}
			if reserved {
				continue
			}
			nk := proto.Clone(k).(*datastorepb.Key)
			nk.Path[len(nk.Path)-1].IdType = &datastorepb.Key_PathElement_Id{Id: id}
			out[i] = nk
			break
		}
	}
	return out, nil
}

// ReserveIDs implements IDAllocator.
func (a *LocalAllocator) ReserveIDs(ctx context.Context, project, database string, keys []*datastorepb.Key) error {
	return a.engine.Run(ctx, false, func(t *txn.Txn) error {
		for _, k := range keys {
			id := k.GetPath()[len(k.GetPath())-1].GetId()
			if id == 0 {
				continue // a named key reserves nothing
			}
			ks := allocPartition(project, database, k).Keyspace()
			if err := t.Upsert(ctx, SystemKeyspace, reservedKey(ks, id), []byte{1}); err != nil {
				return err
			}
		}
		return nil
	})
}
