package embedded

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/atomictest"
)

func TestWriteAtomic(t *testing.T) {
	s := open(t, t.TempDir())
	n := 0
	atomictest.Run(t, atomictest.Kit{
		Store: s,
		Keyspace: func(*testing.T) adapters.Keyspace {
			n++
			return adapters.Keyspace(fmt.Sprintf("ks%d", n))
		},
		Key:   func(i int) []byte { return []byte(fmt.Sprintf("k%04d", i)) },
		Value: func(_ []byte, n int) []byte { return []byte(strconv.Itoa(n)) },
		Payload: func(t *testing.T, v []byte) int {
			n, err := strconv.Atoi(string(v))
			if err != nil {
				t.Fatalf("value %q: %v", v, err)
			}
			return n
		},
		Invalid: func(*testing.T) [][]adapters.Mutation {
			return [][]adapters.Mutation{
				{atomictest.Upsert([]byte("e1"), []byte("1"), adapters.Expect{}), atomictest.Upsert(nil, []byte("1"), adapters.Expect{})},
				{atomictest.Upsert([]byte("e2"), []byte("1"), adapters.Expect{Kind: 9})},
			}
		},
	})
}
