package txn

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/nemocache/nemo/cache"
)

// Single-key linearizability of the engine's one-operation API: the
// lock-free Get against Upsert, Insert and Delete (one-operation
// transactions), with eviction and write-back running underneath. Checked
// with porcupine, partitioned by key; the state of a key is its value, or
// "" for absent.

type kvInput struct {
	op  string // get, upsert, insert, delete
	key int
	val string
}

type kvOutput struct {
	val string // get: the value, "" absent
	ok  bool   // get: found; insert: inserted; delete: existed
}

var kvModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[int][]porcupine.Operation{}
		for _, op := range h {
			key := op.Input.(kvInput).key
			by[key] = append(by[key], op)
		}
		out := make([][]porcupine.Operation, 0, len(by))
		for _, ops := range by {
			out = append(out, ops)
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(string), input.(kvInput), output.(kvOutput)
		switch in.op {
		case "get":
			return out.ok == (s != "") && out.val == s, s
		case "upsert":
			return true, in.val
		case "insert":
			if s != "" {
				return !out.ok, s
			}
			return out.ok, in.val
		case "delete":
			return out.ok == (s != ""), ""
		}
		return false, s
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(kvInput), output.(kvOutput)
		return fmt.Sprintf("%s(%d,%q) -> %q %v", in.op, in.key, in.val, out.val, out.ok)
	},
}

func TestLinearizableSingleKey(t *testing.T) {
	ctx := context.Background()
	v := newEnv(t,
		cache.Options{MaxBytes: 6 * (64 + 16), MaxKeyBytes: 64, AdmitWait: time.Millisecond,
			FlushInterval: 5 * time.Millisecond, MaxDirtyAge: 5 * time.Millisecond},
		Options{Retries: 100})
	const clients, opsEach, keys = 6, 250, 8
	var clock atomic.Int64
	var mu sync.Mutex
	var hist []porcupine.Operation
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c)+seedShift(t), 5))
			// Past opsEach, go on (up to 4x) until eviction and write-back
			// have both run underneath: on a fast run the workload could
			// otherwise end before the flusher's first pass.
			churned := func() bool { bs := v.buf.Stats(); return bs.Evictions > 0 && bs.Writebacks > 0 }
			for i := 0; (i < opsEach || !churned()) && i < 4*opsEach && !t.Failed(); i++ {
				in := kvInput{key: rng.IntN(keys), val: fmt.Sprintf("c%d.%d", c, i)}
				var out kvOutput
				call := clock.Add(1)
				var err error
				switch r := rng.IntN(10); {
				case r < 4:
					in.op, in.val = "get", ""
					var val []byte
					val, out.ok, err = v.e.Get(ctx, ks, k(in.key), ReadLatest)
					out.val = string(val)
				case r < 6:
					in.op = "upsert"
					err = v.e.Upsert(ctx, ks, k(in.key), []byte(in.val))
				case r < 8:
					in.op = "insert"
					err = v.e.Insert(ctx, ks, k(in.key), []byte(in.val))
					out.ok = err == nil
					if errors.Is(err, ErrExists) {
						err = nil
					}
				default:
					in.op, in.val = "delete", ""
					out.ok, err = v.e.Delete(ctx, ks, k(in.key))
				}
				ret := clock.Add(1)
				if errors.Is(err, ErrConflict) {
					continue // aborted after its retries: it had no effect
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				hist = append(hist, porcupine.Operation{ClientId: c, Input: in, Output: out, Call: call, Return: ret})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	res, info := porcupine.CheckOperationsVerbose(kvModel, hist, 20*time.Second)
	switch res {
	case porcupine.Ok:
	case porcupine.Illegal:
		path := t.TempDir() + "/history.html"
		if err := porcupine.VisualizePath(kvModel, info, path); err == nil {
			t.Logf("visualization: %s", path)
		}
		t.Fatalf("history of %d operations is not linearizable", len(hist))
	default:
		t.Fatalf("porcupine: %s", res)
	}
	if bs := v.buf.Stats(); bs.Evictions == 0 || bs.Writebacks == 0 {
		t.Fatalf("no eviction or write-back ran underneath: %+v", bs)
	}
	// The check has teeth: the same history with one read answered by a
	// value nobody wrote is rejected.
	bad := append([]porcupine.Operation(nil), hist...)
	for i := len(bad) - 1; i >= 0; i-- {
		if in := bad[i].Input.(kvInput); in.op == "get" {
			bad[i].Output = kvOutput{val: "never written", ok: true}
			break
		}
	}
	if res := porcupine.CheckOperationsTimeout(kvModel, bad, 20*time.Second); res != porcupine.Illegal {
		t.Fatalf("a corrupted history checks as %s", res)
	}
	t.Logf("%d operations linearizable", len(hist))
}
