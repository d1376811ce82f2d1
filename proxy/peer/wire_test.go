package peer

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/txn"
)

// TestWireRoundTrip: every message survives marshal and unmarshal, nil
// and empty bytes told apart.
func TestWireRoundTrip(t *testing.T) {
	reqs := []request{
		{readOnly: true},
		{op: txn.Op{Kind: txn.OpGet, Keyspace: "t1", Key: []byte("k")}, deadline: 1234567890123},
		{op: txn.Op{Kind: txn.OpUpsert, Keyspace: "t1", Key: []byte("k"), Value: []byte{}}},
		{op: txn.Op{Kind: txn.OpScan, Keyspace: "t1", Key: []byte{}, End: []byte("z"), Limit: 100}},
		{op: txn.Op{Kind: txn.OpScan, Keyspace: "t1", Key: []byte("a")}},
		{op: txn.Op{Kind: txn.OpGetMany, Keyspace: "datastore/p//ns", Keys: [][]byte{[]byte("a"), {}, []byte("c")}}},
		{op: txn.Op{Kind: txn.OpCommit}},
	}
	for _, want := range reqs {
		var got request
		if err := got.unmarshal(want.marshal()); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("request round trip:\n got %#v\nwant %#v", got, want)
		}
	}
	reps := []reply{
		{},
		{res: txn.Result{Value: []byte{}, Exists: true}},
		{res: txn.Result{Value: []byte("v"), Exists: true, Known: true}},
		{res: txn.Result{Values: [][]byte{nil, {}, []byte("x")}}},
		{res: txn.Result{Records: []adapters.Record{{Key: []byte("a"), Value: []byte("1"), Version: "W/1"}, {Key: []byte("b"), Value: []byte{}}}, Next: []byte("c")}},
		{res: txn.Result{Keyspace: "t2"}},
		{res: txn.Result{Committed: []txn.Change{{Op: txn.ChangePut, Keyspace: "t", Key: []byte("k"), Value: []byte("v")}, {Op: txn.ChangeDelete, Keyspace: "t", Key: []byte("d")}}}},
		{err: &wireError{mask: 5, msg: "boom"}},
	}
	for _, want := range reps {
		var got reply
		if err := got.unmarshal(want.marshal()); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("reply round trip:\n got %#v\nwant %#v", got, want)
		}
	}
	for _, want := range []readRequest{
		{ks: "t", keys: [][]byte{[]byte("a"), []byte("b")}},
		{ks: "t", rangeRead: true, start: []byte{}, end: []byte("m"), limit: 7},
		{ks: "t", rangeRead: true, start: []byte("a")},
	} {
		var got readRequest
		if err := got.unmarshal(want.marshal()); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("read request round trip:\n got %#v\nwant %#v", got, want)
		}
	}
	for _, want := range []readReply{
		{},
		{recs: []adapters.Record{{Key: []byte("a")}, {Key: []byte("b"), Value: []byte{}}}, more: true},
		{err: &wireError{mask: 1, msg: "x"}},
	} {
		var got readReply
		if err := got.unmarshal(want.marshal()); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("read reply round trip:\n got %#v\nwant %#v", got, want)
		}
	}
}

// TestWireErrors: an error crossing the wire still matches, with
// errors.Is, every engine and adapter error the original matched, and no
// other; its message is kept.
func TestWireErrors(t *testing.T) {
	cases := []error{
		fmt.Errorf("%w: %q", txn.ErrExists, "k"),
		fmt.Errorf("wrapped: %w", txn.ErrStoreAborted), // also ErrConflict
		fmt.Errorf("%w: %w", txn.ErrNotOwner, txn.ErrLeaseUnavailable),
		adapters.ErrUnknownOutcome, // also ErrUnavailable
		context.DeadlineExceeded,
		errors.New("not one of them"),
	}
	for _, orig := range cases {
		var rep reply
		if err := rep.unmarshal((&reply{err: toWire(orig)}).marshal()); err != nil {
			t.Fatal(err)
		}
		got := rep.err.err()
		if got == nil || got.Error() != orig.Error() {
			t.Fatalf("%v crossed as %v", orig, got)
		}
		for _, target := range wireErrors {
			if errors.Is(got, target) != errors.Is(orig, target) {
				t.Errorf("%v: errors.Is(%v) = %v after the wire, %v before", orig, target, errors.Is(got, target), errors.Is(orig, target))
			}
		}
	}
	if len(wireErrors) > 64 {
		t.Fatalf("%d wire errors do not fit the mask", len(wireErrors))
	}
}

// TestWireMalformed: a message that is not one is refused, never
// half-read into a request that looks valid.
func TestWireMalformed(t *testing.T) {
	for _, b := range [][]byte{
		{0x0a},                               // a bytes field with no length
		{0x08, 0xff},                         // a truncated varint
		{0x0a, 0x05, 'a'},                    // a bytes field longer than the message
		{0x0a, 0x00},                         // field 1 (kind) as bytes, well formed otherwise: the type is what is wrong
		{0x38, 0xff, 0xff, 0xff, 0xff, 0x0f}, // limit past 2^31
	} {
		var r request
		if err := r.unmarshal(b); err == nil {
			t.Errorf("% x unmarshalled as %#v", b, r)
		}
	}
}

// TestReadValueSaysAbsentByOk: the owner's answer to a point read carries
// absence as a nil value, decided by whether the key exists and never by
// the value the read returned (an absent key's may be empty and non-nil),
// and survives the wire as such.
func TestReadValueSaysAbsentByOk(t *testing.T) {
	for _, c := range []struct {
		v       []byte
		ok      bool
		present bool
	}{
		{nil, false, false},
		{[]byte{}, false, false}, // an absent key's empty value: still absent
		{[]byte("x"), false, false},
		{nil, true, true}, // present and empty
		{[]byte{}, true, true},
		{[]byte("x"), true, true},
	} {
		rep := readReply{recs: []adapters.Record{{Key: []byte("k"), Value: readValue(c.v, c.ok)}}}
		var got readReply
		if err := got.unmarshal(rep.marshal()); err != nil {
			t.Fatal(err)
		}
		if present := got.recs[0].Value != nil; present != c.present {
			t.Errorf("readValue(%q, %v) reads as present %v on the other side, want %v", c.v, c.ok, present, c.present)
		}
		if c.present && len(c.v) > 0 && string(got.recs[0].Value) != string(c.v) {
			t.Errorf("readValue(%q, %v) arrives as %q", c.v, c.ok, got.recs[0].Value)
		}
	}
}
