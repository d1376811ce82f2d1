package aztable

import (
	"strings"
	"sync"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/aztable/tablecodec"
)

// DefaultETagMemory is the default of Options.ETagMemory: how many
// entities the adapter remembers nemo's stamps of (see stampMemo).
const DefaultETagMemory = 100_000

// stampMemo remembers, for entities this Store wrote, the stamps nemo put
// in the value it wrote (Timestamp and ETag, which the frontend gave the
// client) next to the ETag the service answered the write with. The
// service ignores a client's Timestamp and stamps its own, so an entity
// read back from the service carries the service's Timestamp and ETag;
// when the service's ETag still equals the remembered one, the entity has
// not changed since nemo wrote it, and the read gives it nemo's stamps
// back (see restore). Any other ETag means the entity changed elsewhere,
// and the read keeps the service's stamps: a new ETag, correctly.
//
// The memo is self-validating: an entry is used only while the service
// still reports the very ETag its write produced, so a stale or lost entry
// never yields a wrong stamp, only a changed one (the client's ETag then
// fails with 412 once, as it would without the memo).
//
// It holds at most max entries, replaced by CLOCK (second chance). An
// entry costs about 100 bytes plus one allocation holding the table name
// and the encoded key: its slot (56 bytes), its map entry and the slack of
// the growing slot slice and map (see TestStampMemoFootprint: 164 bytes
// with a 60-byte table name and key). The ETags are kept as 8-byte tick
// counts when they have the service's datetime form (Azure's and
// Azurite's do, and nemo's always); any other spelling is kept as text
// and costs its length more. The default of 100 000 entries with 60-byte
// keys takes about 16 MB once full; memory grows with use up to that.
type stampMemo struct {
	mu    sync.Mutex
	max   int
	idx   map[string]int32
	slots []memoSlot
	hand  int
	seq   uint64 // counts puts; a slot records the count at its put
}

// memoSlot is one remembered write; key "" marks a free slot. The
// service's ETag and nemo's are kept as ticks (nemo's is then
// datetimeETag(ts)); raw holds whichever does not have that form.
type memoSlot struct {
	key string // keyspace + "\x00" + encoded key
	svc int64  // the service's ETag, as ticks
	ts  int64  // nemo's Timestamp, in ticks
	seq uint64
	raw *rawETags
	ref bool
}

// rawETags are ETags of another spelling than datetimeETag's ("" for one
// that has it).
type rawETags struct{ svc, nemo string }

// svcETag is the slot's service ETag, compacted as memoSlot keeps it.
func svcETag(etag string) (int64, string) {
	if t, ok := parseDatetimeETag(etag); ok {
		return t, ""
	}
	return 0, etag
}

// matches reports whether the slot's service ETag is etag.
func (sl *memoSlot) matches(etag string) bool {
	t, raw := svcETag(etag)
	if sl.raw != nil && sl.raw.svc != "" {
		return raw == sl.raw.svc
	}
	return raw == "" && t == sl.svc
}

// nemoETag is the ETag nemo stamped.
func (sl *memoSlot) nemoETag() string {
	if sl.raw != nil && sl.raw.nemo != "" {
		return sl.raw.nemo
	}
	return datetimeETag(sl.ts)
}

const (
	etagPrefix = `W/"datetime'`
	etagSuffix = `'"`
)

// datetimeETag is the ETag Azure derives from a write time, e.g.
// W/"datetime'2026-12-02T08%3A09%3A46.2133931Z'".
func datetimeETag(ticks int64) string {
	s := tablecodec.FromTicks(ticks).Format("2006-01-02T15:04:05.0000000Z")
	return etagPrefix + strings.ReplaceAll(s, ":", "%3A") + etagSuffix
}

// parseDatetimeETag returns the ticks of an ETag of datetimeETag's form,
// and false for any other spelling (which then must be kept as text).
func parseDatetimeETag(etag string) (int64, bool) {
	s, ok := strings.CutPrefix(etag, etagPrefix)
	if !ok {
		return 0, false
	}
	if s, ok = strings.CutSuffix(s, etagSuffix); !ok {
		return 0, false
	}
	t, err := tablecodec.ParseDateTime(strings.ReplaceAll(s, "%3A", ":"))
	if err != nil {
		return 0, false
	}
	ticks := tablecodec.Ticks(t)
	if datetimeETag(ticks) != etag {
		return 0, false
	}
	return ticks, true
}

// newStampMemo returns a memo of at most max entries; nil (remembering
// nothing) when max < 0. max 0 means DefaultETagMemory.
func newStampMemo(max int) *stampMemo {
	if max < 0 {
		return nil
	}
	if max == 0 {
		max = DefaultETagMemory
	}
	return &stampMemo{max: max, idx: map[string]int32{}}
}

func memoKey(ks adapters.Keyspace, key []byte) string {
	return string(ks) + "\x00" + string(key)
}

// put remembers that the service answered the write of an entity stamped
// (ts, etag) by nemo with the ETag svc.
func (m *stampMemo) put(ks adapters.Keyspace, key []byte, svc adapters.Version, ts int64, etag string) {
	if m == nil {
		return
	}
	k := memoKey(ks, key)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	sl := memoSlot{key: k, ts: ts, seq: m.seq, ref: true}
	var raw rawETags
	sl.svc, raw.svc = svcETag(string(svc))
	if etag != datetimeETag(ts) {
		raw.nemo = etag
	}
	if raw != (rawETags{}) {
		sl.raw = &raw
	}
	if i, ok := m.idx[k]; ok {
		sl.key = m.slots[i].key
		m.slots[i] = sl
		return
	}
	var i int
	if len(m.slots) < m.max {
		i = len(m.slots)
		m.slots = append(m.slots, sl)
	} else {
		for { // CLOCK: a referenced slot gets a second chance
			if m.hand >= len(m.slots) {
				m.hand = 0
			}
			if s := &m.slots[m.hand]; s.key == "" || !s.ref {
				break
			} else {
				s.ref = false
			}
			m.hand++
		}
		i = m.hand
		m.hand++
		if old := m.slots[i].key; old != "" {
			delete(m.idx, old)
		}
		m.slots[i] = sl
	}
	m.idx[k] = int32(i)
}

// drop forgets the entity (deleted, or written with an unknown outcome).
func (m *stampMemo) drop(ks adapters.Keyspace, key []byte) {
	if m == nil {
		return
	}
	k := memoKey(ks, key)
	m.mu.Lock()
	defer m.mu.Unlock()
	if i, ok := m.idx[k]; ok {
		delete(m.idx, k)
		m.slots[i] = memoSlot{}
	}
}

// mark is the memo's put count, taken before a read is sent (see restore).
func (m *stampMemo) mark() uint64 {
	if m == nil {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.seq
}

// restore returns rec with nemo's stamps when the memo holds the write
// that produced rec.Version, else rec unchanged. An entry whose ETag
// differs is dropped (the entity changed elsewhere), unless it was put
// after mark, the count taken before the read was sent: then the read
// may predate the write, and the entry stays. rec.Version stays the
// service's ETag.
func (m *stampMemo) restore(ks adapters.Keyspace, rec adapters.Record, mark uint64) adapters.Record {
	if m == nil || rec.Value == nil || rec.Version == "" {
		return rec
	}
	k := memoKey(ks, rec.Key)
	m.mu.Lock()
	i, ok := m.idx[k]
	if !ok {
		m.mu.Unlock()
		return rec
	}
	sl := &m.slots[i]
	if !sl.matches(string(rec.Version)) {
		if sl.seq <= mark {
			delete(m.idx, k)
			*sl = memoSlot{}
		}
		m.mu.Unlock()
		return rec
	}
	sl.ref = true
	ts, etag := sl.ts, sl.nemoETag()
	m.mu.Unlock()
	e, err := tablecodec.DecodeEntity(rec.Value)
	if err != nil {
		return rec // decodeEntity produced it: cannot happen
	}
	e.Timestamp, e.ETag = tablecodec.FromTicks(ts), etag
	rec.Value = tablecodec.EncodeEntity(e)
	return rec
}
