package datastore

import (
	"context"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/protobuf/proto"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/datastore/dscodec"
)

// lookupBudget is how many entity bytes one Lookup returns before it defers
// the remaining keys, as the service does for large responses.
var lookupBudget = 8 << 20

// Lookup implements datastorepb.DatastoreServer. Its found results hold
// the stored bytes as they are (rawResult): for gRPC only.
func (f *Frontend) Lookup(ctx context.Context, req *datastorepb.LookupRequest) (*datastorepb.LookupResponse, error) {
	return f.lookup(ctx, req, true)
}

// lookup answers a Lookup; with raw, each entity found, when no property
// mask applies, is the stored bytes with the key asked for (rawResult),
// and is not decoded.
func (f *Frontend) lookup(ctx context.Context, req *datastorepb.LookupRequest, raw bool) (*datastorepb.LookupResponse, error) {
	if err := f.checkProject(req.GetProjectId()); err != nil {
		return nil, err
	}
	if len(req.GetKeys()) > maxLookupKeys {
		return nil, invalid("cannot look up more than %d keys", maxLookupKeys)
	}
	type lookupKey struct {
		key *datastorepb.Key
		ks  adapters.Keyspace
		enc []byte
	}
	var keys []lookupKey
	seen := map[string]bool{}
	for _, k := range req.GetKeys() {
		nk, p, enc, err := encodeRead(req.GetProjectId(), req.GetDatabaseId(), k)
		if err != nil {
			return nil, err
		}
		ks := f.keyspace(p)
		if id := string(ks) + "\x00" + string(enc); !seen[id] {
			seen[id] = true
			keys = append(keys, lookupKey{nk, ks, enc})
		}
	}
	pm, err := newReadMask(req.GetPropertyMask())
	if err != nil {
		return nil, err
	}
	s, newID, done, err := f.openRead(req.GetReadOptions())
	if err != nil {
		return nil, err
	}
	defer done()
	// In a transaction the keys of each keyspace are read at once: what
	// must come from the store comes in one call (in coherence mode
	// shared, every read of a read-write transaction; one read of the
	// store's snapshot for a read-only one).
	var batch map[string][]byte
	if s != nil {
		byKs := map[adapters.Keyspace][][]byte{}
		for _, lk := range keys {
			byKs[lk.ks] = append(byKs[lk.ks], lk.enc)
		}
		batch = map[string][]byte{}
		for ks, encs := range byKs {
			vals, err := s.t.GetMany(ctx, ks, encs)
			if err != nil {
				return nil, toStatus(err)
			}
			for i, enc := range encs {
				batch[string(ks)+"\x00"+string(enc)] = vals[i]
			}
		}
	}
	resp := &datastorepb.LookupResponse{Transaction: newID}
	size := 0
	for _, lk := range keys {
		nk := lk.key
		if size >= lookupBudget {
			resp.Deferred = append(resp.Deferred, nk)
			continue
		}
		var v []byte
		var ok bool
		if batch != nil {
			v = batch[string(lk.ks)+"\x00"+string(lk.enc)]
			ok = v != nil
		} else if v, ok, err = f.read(ctx, s, lk.ks, lk.enc); err != nil {
			return nil, toStatus(err)
		}
		if !ok {
			resp.Missing = append(resp.Missing, &datastorepb.EntityResult{Entity: &datastorepb.Entity{Key: nk}, Version: f.readVersion()})
			continue
		}
		var r *datastorepb.EntityResult
		if raw && pm == nil {
			r, err = rawResult(v, nk)
		} else {
			r, err = decodedResult(v, nk, pm)
		}
		if err != nil {
			return nil, toStatus(err)
		}
		resp.Found = append(resp.Found, r)
		size += len(v)
	}
	resp.ReadTime = readTime(s)
	return resp, nil
}

// rawResult is engine value v as the EntityResult of the entity at key,
// whose bytes it holds as unknown fields (dscodec.AppendResult), which
// gRPC's marshalling writes as they are: a buffered read answered without
// decoding the entity and encoding it again. Only marshalling can read
// it, so it is for gRPC answers.
func rawResult(v []byte, key *datastorepb.Key) (*datastorepb.EntityResult, error) {
	kb, err := proto.Marshal(key)
	if err != nil {
		return nil, err
	}
	b, err := dscodec.AppendResult(make([]byte, 0, len(v)+len(kb)+8), v, kb)
	if err != nil {
		return nil, err
	}
	r := &datastorepb.EntityResult{}
	r.ProtoReflect().SetUnknown(b)
	return r, nil
}

// decodedResult is engine value v as the EntityResult of the entity at
// key, with the property mask pm applied.
func decodedResult(v []byte, key *datastorepb.Key, pm readMask) (*datastorepb.EntityResult, error) {
	r, err := dscodec.DecodeValue(v)
	if err != nil {
		return nil, err
	}
	r.Entity.Key = key
	pm.apply(r.Entity)
	return r, nil
}
