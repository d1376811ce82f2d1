package datastore

import (
	"bytes"

	"cloud.google.com/go/datastore/apiv1/datastorepb"
	"google.golang.org/protobuf/proto"
)

// A cursor is a position in a query's total order: the sort values of a
// result row, its encoded key and, for projection rows, its projected
// values. It is "nC1" followed by a deterministic protobuf ArrayValue:
// [integer n, blob key, n sort values, projected values...]. Resuming
// recomputes the query and keeps rows strictly after (start cursor) or at
// and before (end cursor) the position, so cursors stay valid across writes.
var cursorMagic = []byte("nC1")

// position is a row's place in the query order.
type position struct {
	sort []*datastorepb.Value
	key  []byte
	proj []*datastorepb.Value
}

func encodeCursor(p *position) []byte {
	vals := make([]*datastorepb.Value, 0, 2+len(p.sort)+len(p.proj))
	vals = append(vals,
		&datastorepb.Value{ValueType: &datastorepb.Value_IntegerValue{IntegerValue: int64(len(p.sort))}},
		&datastorepb.Value{ValueType: &datastorepb.Value_BlobValue{BlobValue: p.key}})
	vals = append(vals, p.sort...)
	vals = append(vals, p.proj...)
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(&datastorepb.ArrayValue{Values: vals})
	return append(bytes.Clone(cursorMagic), b...)
}

// decodeCursor parses a cursor made for a query with nSort sort orders and
// nProj projected properties.
func decodeCursor(b []byte, nSort, nProj int) (*position, error) {
	bad := invalid("Invalid query cursor.")
	rest, ok := bytes.CutPrefix(b, cursorMagic)
	if !ok {
		return nil, bad
	}
	var a datastorepb.ArrayValue
	if err := proto.Unmarshal(rest, &a); err != nil {
		return nil, bad
	}
	v := a.GetValues()
	if len(v) != 2+nSort+nProj {
		return nil, bad
	}
	n, ok := v[0].GetValueType().(*datastorepb.Value_IntegerValue)
	if !ok || n.IntegerValue != int64(nSort) {
		return nil, bad
	}
	key, ok := v[1].GetValueType().(*datastorepb.Value_BlobValue)
	if !ok {
		return nil, bad
	}
	for _, x := range v[2:] {
		if rank(x) == rankUnindexed {
			return nil, bad
		}
	}
	return &position{key: key.BlobValue, sort: v[2 : 2+nSort], proj: v[2+nSort:]}, nil
}
