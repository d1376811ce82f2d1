package cache

import (
	"testing"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/fault"
)

// fuzzKeys is the fuzzer's key alphabet: keys and their successors, so that
// cursors, fences and holes at Successor(k) all meet real keys.
var fuzzKeys = [][]byte{
	[]byte("a"), []byte("a\x00"), []byte("a\x00\x00"), []byte("aa"),
	[]byte("ab"), []byte("b"), []byte("b\x00"), []byte("c"),
}

// decodeOps turns fuzz input into a policy, a budget and an operation
// sequence: two header bytes, then three bytes per operation.
func decodeOps(data []byte) (Policy, int64, []op) {
	if len(data) < 2 {
		return PolicyNemo, 0, nil
	}
	policy := []Policy{PolicyNemo, PolicyRecord, PolicyNone}[data[0]%3]
	budget := 400 + 8*int64(data[1])
	key := func(x byte) []byte { return fuzzKeys[int(x)%len(fuzzKeys)] }
	bnd := func(x byte) []byte { // one in nine is no bound
		if int(x)%(len(fuzzKeys)+1) == len(fuzzKeys) {
			return nil
		}
		return key(x % byte(len(fuzzKeys)+1))
	}
	val := func(y byte) []byte { return []byte("vwxyz"[:y%6]) }
	var ops []op
	for data = data[2:]; len(data) >= 3; data = data[3:] {
		c, x, y := data[0], data[1], data[2]
		o := op{ks: testKS}
		switch c % 12 {
		case 0:
			o.kind, o.key = opGet, key(x)
		case 1:
			o.kind, o.key, o.end, o.limit = opScan, bnd(x), bnd(y), int(y/9)%4
			if o.key != nil && o.end != nil && string(o.key) > string(o.end) {
				o.key, o.end = o.end, o.key
			}
		case 2:
			o.kind, o.key, o.val = opUpsert, key(x), val(y)
		case 3:
			o.kind, o.key = opDelete, key(x)
		case 4:
			o.kind, o.key, o.val = opInsert, key(x), val(y)
		case 5:
			o.kind, o.key, o.val = opUpdate, key(x), val(y)
		case 6:
			o.kind = opBatch
			o.writes = []Write{{Key: key(x), Value: val(y), Delete: y&0x80 != 0}, {Key: key(y), Value: val(x), Delete: x&0x80 != 0}}
		case 7:
			o.kind = opEvictStep
		case 8:
			o.kind, o.target = opEvictUntil, 8*int64(y)
		case 9:
			o.kind = opFlush
		case 10:
			o.kind, o.failOp = opFailNext, adapters.Op(y%4)
		case 11:
			o.kind, o.down = opOutage, y%2 == 1
		}
		ops = append(ops, o)
	}
	return policy, budget, ops
}

// FuzzBuffer runs the decoded operation sequence against the model, with
// Check after every step and the store compared with the model at the end.
//
//	go test -run '^$' -fuzz FuzzBuffer -fuzztime 30s -fuzzminimizetime 5s ./cache
func FuzzBuffer(f *testing.F) {
	f.Add([]byte{0, 0, 2, 0, 1, 1, 8, 8, 3, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		policy, budget, ops := decodeOps(data)
		if len(ops) > 64 {
			ops = ops[:64] // longer inputs only slow minimization down
		}
		mem := newMemStore()
		fs := fault.New(mem, fault.Config{})
		sw := &switchStore{faulty: fs, clean: mem}
		sw.on.Store(true)
		opts := modelOptions(policy)
		opts.MaxBytes = budget
		opts.EvictBatch = 3
		b, err := New(sw, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		r := newRunner(t, b, mem, fs, sw, testKS)
		for _, o := range ops {
			r.do(o)
		}
		r.finish()
	})
}
