package proxy

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/cache"
	"github.com/nemocache/nemo/proxy/node"
	"github.com/nemocache/nemo/txn"
)

// Limits of GET /debug/records: the listing is built under the keyspace's
// tree latch, so it is capped to keep a careless query from stalling traffic
// for long.
const (
	defaultRecordLimit = 1000
	maxRecordLimit     = 100000
)

// withNode answers 503 until the engine is open.
func (s *Server) withNode(h func(*node.Node, http.ResponseWriter, *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		n := s.node.Load()
		if n == nil {
			writeJSON(w, http.StatusServiceUnavailable, debugError{"engine is starting"})
			return
		}
		h(n, w, r)
	}
}

type debugError struct {
	Error string `json:"error"`
}

// keyspaceStats is one keyspace in GET /debug/keyspaces.
type keyspaceStats struct {
	Name       string `json:"name"`
	Records    int    `json:"records"`
	Regular    int    `json:"regular"`
	Tombstones int    `json:"tombstones"`
	Sentinels  int    `json:"sentinels"`
	Dirty      int    `json:"dirty"`
	Referenced int    `json:"referenced"`
	Locked     int    `json:"locked"`
	// OpenGaps counts records whose gap bit is 1: the store may hold keys
	// between them and their successor that the buffer does not know of.
	OpenGaps int `json:"open_gaps"`
	KeyBytes int `json:"key_bytes"`
}

type bufferTotals struct {
	UsedBytes  int64 `json:"used_bytes"`
	DirtyBytes int64 `json:"dirty_bytes"`
	MaxBytes   int64 `json:"max_bytes"`
	Records    int   `json:"records"`
}

func debugKeyspaces(n *node.Node, w http.ResponseWriter, _ *http.Request) {
	st := n.Buffer.Stats()
	out := struct {
		Buffer    bufferTotals    `json:"buffer"`
		Keyspaces []keyspaceStats `json:"keyspaces"`
	}{
		Buffer:    bufferTotals{UsedBytes: st.UsedBytes, DirtyBytes: st.DirtyBytes, MaxBytes: st.MaxBytes, Records: st.Records},
		Keyspaces: []keyspaceStats{},
	}
	for _, ks := range n.Buffer.Keyspaces() {
		recs, err := n.Buffer.Records(ks, nil, nil)
		if errors.Is(err, cache.ErrUnknownKeyspace) {
			continue // dropped since Keyspaces listed it
		}
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, debugError{err.Error()})
			return
		}
		out.Keyspaces = append(out.Keyspaces, summarize(ks, recs))
	}
	writeJSON(w, http.StatusOK, out)
}

func summarize(ks adapters.Keyspace, recs []cache.LockInfo) keyspaceStats {
	k := keyspaceStats{Name: string(ks), Records: len(recs)}
	for _, r := range recs {
		switch r.Kind {
		case cache.Regular:
			k.Regular++
		case cache.Tombstone:
			k.Tombstones++
		case cache.Sentinel:
			k.Sentinels++
		}
		if r.Dirty {
			k.Dirty++
		}
		if r.Ref {
			k.Referenced++
		}
		if r.Gap {
			k.OpenGaps++
		}
		if locked(r) {
			k.Locked++
		}
		k.KeyBytes += len(r.Key)
	}
	return k
}

func locked(r cache.LockInfo) bool {
	return r.RowX != 0 || len(r.RowS) > 0 || r.GapX != 0 || len(r.GapS) > 0 || r.Pinned > 0
}

// recordView is one record in GET /debug/records.
type recordView struct {
	// Key is the key as text when it is printable UTF-8; KeyHex always.
	Key    string `json:"key,omitempty"`
	KeyHex string `json:"key_hex"`
	Type   string `json:"type"`
	// Gap is the gap bit: true means the store may hold keys between this
	// record and the next buffered one.
	Gap   bool     `json:"gap"`
	Dirty bool     `json:"dirty"`
	Ref   bool     `json:"ref"`
	Locks lockView `json:"locks"`
}

// lockView lists lock holders by transaction id (0: none).
type lockView struct {
	RowX   uint64   `json:"row_x,omitempty"`
	RowS   []uint64 `json:"row_s,omitempty"`
	GapX   uint64   `json:"gap_x,omitempty"`
	GapS   []uint64 `json:"gap_s,omitempty"`
	Pinned int      `json:"pinned,omitempty"`
}

// debugRecords lists the buffered records of keyspace in [start, end).
// Bounds are given as text (start, end) or hex (start_hex, end_hex); a
// missing start means the first key, a missing end no upper bound. limit caps the answer (default 1000).
func debugRecords(n *node.Node, w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ks := q.Get("keyspace")
	if ks == "" {
		writeJSON(w, http.StatusBadRequest, debugError{"keyspace is required"})
		return
	}
	start, err := bound(q.Get("start"), q.Get("start_hex"), "start")
	if err != nil {
		writeJSON(w, http.StatusBadRequest, debugError{err.Error()})
		return
	}
	end, err := bound(q.Get("end"), q.Get("end_hex"), "end")
	if err != nil {
		writeJSON(w, http.StatusBadRequest, debugError{err.Error()})
		return
	}
	limit := defaultRecordLimit
	if v := q.Get("limit"); v != "" {
		limit, err = strconv.Atoi(v)
		if err != nil || limit <= 0 || limit > maxRecordLimit {
			writeJSON(w, http.StatusBadRequest, debugError{fmt.Sprintf("limit must be an integer from 1 to %d", maxRecordLimit)})
			return
		}
	}
	recs, err := n.Buffer.Records(adapters.Keyspace(ks), start, end)
	switch {
	case errors.Is(err, cache.ErrUnknownKeyspace):
		writeJSON(w, http.StatusNotFound, debugError{err.Error()})
		return
	case err != nil:
		writeJSON(w, http.StatusInternalServerError, debugError{err.Error()})
		return
	}
	out := struct {
		Keyspace  string       `json:"keyspace"`
		Records   []recordView `json:"records"`
		Truncated bool         `json:"truncated"`
	}{Keyspace: ks, Records: []recordView{}}
	if len(recs) > limit {
		recs, out.Truncated = recs[:limit], true
	}
	for _, rec := range recs {
		v := recordView{
			KeyHex: hex.EncodeToString(rec.Key),
			Type:   rec.Kind.String(),
			Gap:    rec.Gap, Dirty: rec.Dirty, Ref: rec.Ref,
			Locks: lockView{RowX: rec.RowX, RowS: rec.RowS, GapX: rec.GapX, GapS: rec.GapS, Pinned: rec.Pinned},
		}
		if printable(rec.Key) {
			v.Key = string(rec.Key)
		}
		out.Records = append(out.Records, v)
	}
	writeJSON(w, http.StatusOK, out)
}

// bound decodes one range bound from its text or hex parameter. A bound
// that is absent or empty is nil: from the first key, or no upper bound.
func bound(text, hexText, name string) ([]byte, error) {
	switch {
	case text != "" && hexText != "":
		return nil, fmt.Errorf("give %s or %s_hex, not both", name, name)
	case hexText != "":
		b, err := hex.DecodeString(hexText)
		if err != nil {
			return nil, fmt.Errorf("%s_hex: %w", name, err)
		}
		return b, nil
	case text != "":
		return []byte(text), nil
	}
	return nil, nil
}

func printable(b []byte) bool {
	if len(b) == 0 || !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// debugFlush writes every dirty record back now and reports what it did.
func debugFlush(n *node.Node, w http.ResponseWriter, r *http.Request) {
	before := n.Buffer.Stats()
	began := time.Now()
	err := n.Engine.Flush(r.Context())
	after := n.Buffer.Stats()
	out := struct {
		DirtyBytesBefore int64   `json:"dirty_bytes_before"`
		DirtyBytesAfter  int64   `json:"dirty_bytes_after"`
		Writebacks       uint64  `json:"writebacks"`
		Seconds          float64 `json:"seconds"`
		Error            string  `json:"error,omitempty"`
	}{
		DirtyBytesBefore: before.DirtyBytes,
		DirtyBytesAfter:  after.DirtyBytes,
		Writebacks:       after.Writebacks - before.Writebacks,
		Seconds:          time.Since(began).Seconds(),
	}
	code := http.StatusOK
	if err != nil {
		out.Error, code = err.Error(), http.StatusBadGateway
	}
	writeJSON(w, code, out)
}

// debugHandover hands one keyspace over (txn.Engine.Handover): 200 once
// its lease is released, 400 without a keyspace, 409 when this node does
// not own it or the mode has no owners, 502 when the write-back or the
// release failed (the keyspace stays this node's).
func debugHandover(n *node.Node, w http.ResponseWriter, r *http.Request) {
	ks := r.URL.Query().Get("keyspace")
	if ks == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "keyspace is required: POST /debug/handover?keyspace=<table or datastore/project/database/namespace>"})
		return
	}
	began := time.Now()
	err := n.Engine.Handover(r.Context(), adapters.Keyspace(ks))
	out := struct {
		Keyspace string  `json:"keyspace"`
		Seconds  float64 `json:"seconds"`
		Error    string  `json:"error,omitempty"`
	}{Keyspace: ks, Seconds: time.Since(began).Seconds()}
	code := http.StatusOK
	switch {
	case errors.Is(err, txn.ErrNoHandover), errors.Is(err, txn.ErrNotOwner):
		out.Error, code = err.Error(), http.StatusConflict
	case err != nil:
		out.Error, code = err.Error(), http.StatusBadGateway
	}
	writeJSON(w, code, out)
}
