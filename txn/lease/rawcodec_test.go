package lease

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/nemocache/nemo/adapters"
)

type rawCodec struct{ lks adapters.Keyspace }

// RawCodec keeps every lease in keyspace lks, keyed by the leased
// keyspace's name, as JSON: the tests' codec on the embedded store.
func RawCodec(lks adapters.Keyspace) Codec { return rawCodec{lks} }

func (c rawCodec) Keyspace(ks adapters.Keyspace) adapters.Keyspace {
	if ks == "" || ks == c.lks {
		return ""
	}
	return c.lks
}

func (c rawCodec) Key(ks adapters.Keyspace) []byte {
	if ks == "" || ks == c.lks {
		return nil
	}
	return []byte(ks)
}

type rawRecord struct {
	Holder string    `json:"holder"`
	Epoch  uint64    `json:"epoch"`
	Expiry time.Time `json:"expiry"`
	Addr   string    `json:"addr,omitempty"`
}

func (rawCodec) Encode(_ adapters.Keyspace, r adapters.LeaseRecord) ([]byte, error) {
	return json.Marshal(rawRecord(r))
}

func (rawCodec) Decode(b []byte) (adapters.LeaseRecord, error) {
	var r rawRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return adapters.LeaseRecord{}, fmt.Errorf("%w: %w", adapters.ErrBadLeaseRecord, err)
	}
	return adapters.LeaseRecord(r), nil
}
