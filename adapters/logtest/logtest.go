// Package logtest is the shared check of the backend commit log's codecs
// (aztable.LogCodec, datastore.LogCodec, txn/blog's RawCodec): the body of
// their fuzz targets. A log record lives in the user's own store, where
// anyone with access can rewrite it, so a codec's decoders must take any
// bytes.
package logtest

import (
	"bytes"
	"errors"
	"testing"

	"github.com/nemocache/nemo/adapters"
)

// Codec is the part of a log codec Decode checks.
type Codec interface {
	EncodeFence(ks adapters.Keyspace, f adapters.LogFence) ([]byte, error)
	DecodeFence(b []byte) (adapters.LogFence, error)
	EncodeEntry(ks adapters.Keyspace, seq uint64, part int, data []byte) ([]byte, error)
	DecodeEntry(b []byte) (seq uint64, part int, data []byte, err error)
}

// Decode feeds b to c's decoders: they must not panic, must refuse with
// adapters.ErrBadLogRecord, and what they accept must encode again (as a
// record of ks) to a record that decodes the same (a fence then names ks).
func Decode(t *testing.T, c Codec, ks adapters.Keyspace, b []byte) {
	t.Helper()
	if fence, err := c.DecodeFence(b); err != nil {
		if !errors.Is(err, adapters.ErrBadLogRecord) {
			t.Fatalf("DecodeFence error %v does not wrap ErrBadLogRecord", err)
		}
	} else if again, err := c.EncodeFence(ks, fence); err != nil {
		t.Fatalf("%+v decoded but does not encode: %v", fence, err)
	} else if back, err := c.DecodeFence(again); err != nil || back != withKeyspace(fence, ks) {
		t.Fatalf("%+v re-encoded decodes to %+v, %v", fence, back, err)
	}
	seq, part, data, err := c.DecodeEntry(b)
	if err != nil {
		if !errors.Is(err, adapters.ErrBadLogRecord) {
			t.Fatalf("DecodeEntry error %v does not wrap ErrBadLogRecord", err)
		}
		return
	}
	again, err := c.EncodeEntry(ks, seq, part, data)
	if err != nil {
		t.Fatalf("seq %d part %d of %d bytes decoded but does not encode: %v", seq, part, len(data), err)
	}
	if s2, p2, d2, err := c.DecodeEntry(again); err != nil || s2 != seq || p2 != part || !bytes.Equal(d2, data) {
		t.Fatalf("seq %d part %d re-encoded decodes to seq %d part %d (%d bytes), %v", seq, part, s2, p2, len(d2), err)
	}
}

// withKeyspace is f as a codec decodes it once encoded for ks.
func withKeyspace(f adapters.LogFence, ks adapters.Keyspace) adapters.LogFence {
	f.Keyspace = ks
	return f
}
