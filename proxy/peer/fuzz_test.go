package peer

import (
	"bytes"
	"testing"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/txn"
)

// FuzzTxnMessages: any bytes unmarshal into a transaction request and a
// reply or fail cleanly, and what unmarshals marshals back to bytes that
// unmarshal to the same message (the encoding is canonical after one
// pass). The seed corpus is in testdata/fuzz/FuzzTxnMessages.
func FuzzTxnMessages(f *testing.F) {
	f.Add((&request{op: txn.Op{Kind: txn.OpScan, Keyspace: "t", Key: []byte{}, End: []byte("z"), Limit: 3}, deadline: 99}).marshal())
	f.Add((&reply{res: txn.Result{Values: [][]byte{nil, {}}, Records: []adapters.Record{{Key: []byte("a"), Value: []byte("b"), Version: "1"}},
		Committed: []txn.Change{{Op: txn.ChangePut, Keyspace: "t", Key: []byte("k"), Value: []byte{}}}}, err: &wireError{mask: 3, msg: "m"}}).marshal())
	f.Fuzz(func(t *testing.T, b []byte) {
		var req request
		if req.unmarshal(b) == nil {
			once := req.marshal()
			var again request
			if err := again.unmarshal(once); err != nil {
				t.Fatalf("a request's own encoding refused: %v", err)
			}
			if !bytes.Equal(again.marshal(), once) {
				t.Fatalf("request encoding not stable: % x then % x", once, again.marshal())
			}
		}
		var rep reply
		if rep.unmarshal(b) == nil {
			once := rep.marshal()
			var again reply
			if err := again.unmarshal(once); err != nil {
				t.Fatalf("a reply's own encoding refused: %v", err)
			}
			if !bytes.Equal(again.marshal(), once) {
				t.Fatalf("reply encoding not stable: % x then % x", once, again.marshal())
			}
			_ = rep.err.err()
		}
	})
}

// FuzzReadMessages is FuzzTxnMessages for the read of a keyspace's owner.
func FuzzReadMessages(f *testing.F) {
	f.Add((&readRequest{ks: "t", rangeRead: true, start: []byte("a"), end: []byte{}, limit: 5}).marshal())
	f.Add((&readReply{recs: []adapters.Record{{Key: []byte("a")}, {Key: []byte("b"), Value: []byte{}}}, more: true}).marshal())
	f.Fuzz(func(t *testing.T, b []byte) {
		var req readRequest
		if req.unmarshal(b) == nil {
			once := req.marshal()
			var again readRequest
			if err := again.unmarshal(once); err != nil || !bytes.Equal(again.marshal(), once) {
				t.Fatalf("read request encoding not stable (%v): % x", err, once)
			}
		}
		var rep readReply
		if rep.unmarshal(b) == nil {
			once := rep.marshal()
			var again readReply
			if err := again.unmarshal(once); err != nil || !bytes.Equal(again.marshal(), once) {
				t.Fatalf("read reply encoding not stable (%v): % x", err, once)
			}
		}
	})
}

// FuzzBalanceMessages: a rebalance's messages (Status, Take) either refuse
// the bytes or decode into a message whose own encoding decodes to the
// same encoding.
func FuzzBalanceMessages(f *testing.F) {
	f.Add((&statusReply{owned: 3, draining: true}).marshal())
	f.Add((&takeRequest{ks: "datastore/p//ns"}).marshal())
	f.Add((&takeReply{err: &wireError{mask: 1, msg: "held"}}).marshal())
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, pair := range []struct{ m, again message }{
			{&statusRequest{}, &statusRequest{}},
			{&statusReply{}, &statusReply{}},
			{&takeRequest{}, &takeRequest{}},
			{&takeReply{}, &takeReply{}},
		} {
			if pair.m.unmarshal(b) != nil {
				continue
			}
			once := pair.m.marshal()
			if err := pair.again.unmarshal(once); err != nil || !bytes.Equal(pair.again.marshal(), once) {
				t.Fatalf("%T encoding not stable (%v): % x", pair.m, err, once)
			}
		}
	})
}
