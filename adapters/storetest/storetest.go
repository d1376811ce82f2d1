// Package storetest holds the helpers of tests that call an adapters.Store
// directly: Deletes spells unconditional deletes, Values reads a Get's
// answer as values. Only tests import it.
package storetest

import "github.com/nemocache/nemo/adapters"

// Deletes turns keys into unconditional deletes.
func Deletes(keys [][]byte) []adapters.Write {
	ws := make([]adapters.Write, len(keys))
	for i, k := range keys {
		ws[i] = adapters.Write{Key: k}
	}
	return ws
}

// Values returns each record's value (nil for an absent one), passing err
// through: vals, err := Values(store.Get(ctx, ks, keys)).
func Values(recs []adapters.Record, err error) ([][]byte, error) {
	if err != nil {
		return nil, err
	}
	vals := make([][]byte, len(recs))
	for i, r := range recs {
		vals[i] = r.Value
	}
	return vals, nil
}
