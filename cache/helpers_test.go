package cache

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nemocache/nemo/adapters"
	"github.com/nemocache/nemo/adapters/embedded"
)

// testKS is the keyspace the single-keyspace tests use.
const testKS adapters.Keyspace = "t"

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// openEmbedded opens a fresh embedded store closed at the end of the test.
func openEmbedded(t testing.TB) *embedded.Store {
	t.Helper()
	st, err := embedded.Open(t.TempDir(), embedded.Options{NoSync: true, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// fmtKey prints a key readably: "" for the empty key, the bytes as they are
// when printable, Go-quoted otherwise.
func fmtKey(k []byte) string {
	if len(k) == 0 {
		return `""`
	}
	s := strconv.Quote(string(k))
	if s[1:len(s)-1] == string(k) && !strings.ContainsAny(string(k), " |=") {
		return string(k)
	}
	return s
}

// dumpRecord prints one record as `key[=value] K gN [d] [r]` (value only
// for regular records).
func dumpRecord(r *record) string {
	var sb strings.Builder
	sb.WriteString(fmtKey(r.key()))
	if r.kind() == Regular {
		sb.WriteString("=" + string(r.value()))
	}
	sb.WriteString(" " + map[Kind]string{Regular: "R", Tombstone: "T", Sentinel: "S"}[r.kind()])
	if r.gap() {
		sb.WriteString(" g1")
	} else {
		sb.WriteString(" g0")
	}
	if r.dirty() {
		sb.WriteString(" d")
	}
	if r.ref() {
		sb.WriteString(" r")
	}
	return sb.String()
}

// dump renders a keyspace's records in key order, the head fence first:
// `"" T g1 | a=1 R g0 d | b T g1 r`.
func dump(t testing.TB, b *Buffer, ks adapters.Keyspace) string {
	t.Helper()
	b.mu.RLock()
	s, ok := b.spaces[ks] // not b.space: dumping a closed buffer is fine
	b.mu.RUnlock()
	if !ok {
		t.Fatalf("no keyspace %q", ks)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	var parts []string
	s.tree.Ascend(func(r *record) bool { parts = append(parts, dumpRecord(r)); return true })
	return strings.Join(parts, " | ")
}

// parseKey undoes fmtKey.
func parseKey(t testing.TB, s string) []byte {
	t.Helper()
	if strings.HasPrefix(s, `"`) {
		u, err := strconv.Unquote(s)
		if err != nil {
			t.Fatalf("bad key %s: %v", s, err)
		}
		return []byte(u)
	}
	return []byte(s)
}

// loadState installs records written in dump's format into ks, with exact
// byte accounting (and dirty queue entries for dirty records), so a rule test
// can start from any state. An entry for "" sets the head fence's bits. The
// caller makes the state consistent with the store.
func loadState(t testing.TB, b *Buffer, ks adapters.Keyspace, state string) {
	t.Helper()
	s, err := b.space(ks)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ent := range strings.Split(state, "|") {
		f := strings.Fields(ent)
		if len(f) == 0 {
			continue
		}
		kv, val, hasVal := strings.Cut(f[0], "=")
		key := parseKey(t, kv)
		var r *record
		if len(key) == 0 {
			r = s.head
			r.flags.Store(uint32(Tombstone) | flagHead)
		} else {
			kind := map[string]Kind{"R": Regular, "T": Tombstone, "S": Sentinel}[f[1]]
			if kind == 0 || (kind == Regular) != hasVal {
				t.Fatalf("bad state entry %q", ent)
			}
			r = newRecord(key, []byte(val), kind)
		}
		for _, fl := range f[2:] {
			switch fl {
			case "g0":
			case "g1":
				r.setGap(true)
			case "d":
				r.setDirty(true)
			case "r":
				r.setRef(true)
			default:
				t.Fatalf("bad flag %q in %q", fl, ent)
			}
		}
		if r.head() {
			continue
		}
		if bytes.Equal(s.floor(r.key()).key(), r.key()) {
			t.Fatalf("duplicate key in state %q", ent)
		}
		s.put(r)
		b.used.Add(b.size(r))
		b.count.Add(1)
		if r.dirty() {
			b.dirty.Add(b.size(r))
			s.dirtyQ = append(s.dirtyQ, dirtyEntry{r: r})
		}
	}
}

// parseStore turns "a=1 b=2 c=" into records (c has an empty value).
func parseStore(t testing.TB, spec string) []adapters.Record {
	t.Helper()
	var recs []adapters.Record
	for _, f := range strings.Fields(spec) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			t.Fatalf("bad store entry %q", f)
		}
		recs = append(recs, adapters.Record{Key: parseKey(t, k), Value: []byte(v)})
	}
	return recs
}

// dumpStore renders a keyspace of a store as "a=1 b=2".
func dumpStore(t testing.TB, st adapters.Store, ks adapters.Keyspace) string {
	t.Helper()
	recs, _, err := st.GetRange(context.Background(), ks, nil, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	parts := make([]string, len(recs))
	for i, r := range recs {
		parts[i] = fmtKey(r.Key) + "=" + string(r.Value)
	}
	return strings.Join(parts, " ")
}

// dumpRecs renders scan results as "a=1 b=2".
func dumpRecs(recs []adapters.Record) string {
	parts := make([]string, len(recs))
	for i, r := range recs {
		parts[i] = fmtKey(r.Key) + "=" + string(r.Value)
	}
	return strings.Join(parts, " ")
}

// reqs renders the request counters compactly, omitting zeros: "get:1 upsert:2".
func reqs(st adapters.Stats) string {
	var parts []string
	for op := adapters.OpGet; op <= adapters.OpDelete; op++ {
		if n := st[op].Requests; n > 0 {
			parts = append(parts, op.String()+":"+strconv.FormatUint(n, 10))
		}
	}
	return strings.Join(parts, " ")
}

// hookStore runs a one-shot hook right after the inner call of an operation
// returns, before the caller sees the result: it is how a test makes another
// buffer operation happen exactly inside a store call.
type hookStore struct {
	adapters.Store
	mu    sync.Mutex
	hooks map[adapters.Op]func()
	// unversioned hides the versions reads return, so records read carry
	// no base bytes: the rule tests count resident bytes exactly. Writes
	// keep theirs (write-back marks a record clean only with the version
	// the store gave it). Versions and conditional write-back have tests
	// of their own.
	unversioned bool
}

func (h *hookStore) strip(recs []adapters.Record) []adapters.Record {
	if h.unversioned {
		for i := range recs {
			recs[i].Version = ""
		}
	}
	return recs
}

func (h *hookStore) after(op adapters.Op, fn func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.hooks == nil {
		h.hooks = map[adapters.Op]func(){}
	}
	h.hooks[op] = fn
}

func (h *hookStore) run(op adapters.Op) {
	h.mu.Lock()
	fn := h.hooks[op]
	delete(h.hooks, op)
	h.mu.Unlock()
	if fn != nil {
		fn()
	}
}

func (h *hookStore) Get(ctx context.Context, ks adapters.Keyspace, keys [][]byte) ([]adapters.Record, error) {
	v, err := h.Store.Get(ctx, ks, keys)
	h.run(adapters.OpGet)
	return h.strip(v), err
}

func (h *hookStore) GetRange(ctx context.Context, ks adapters.Keyspace, start, end []byte, limit int) ([]adapters.Record, bool, error) {
	recs, more, err := h.Store.GetRange(ctx, ks, start, end, limit)
	h.run(adapters.OpGetRange)
	return h.strip(recs), more, err
}

func (h *hookStore) Upsert(ctx context.Context, ks adapters.Keyspace, ws []adapters.Write) ([]adapters.Version, error) {
	vers, err := h.Store.Upsert(ctx, ks, ws)
	h.run(adapters.OpUpsert)
	return vers, err
}

func (h *hookStore) Delete(ctx context.Context, ks adapters.Keyspace, ws []adapters.Write) error {
	err := h.Store.Delete(ctx, ks, ws)
	h.run(adapters.OpDelete)
	return err
}

// switchStore routes calls to faulty while faults are on and to clean
// otherwise, so checks and the final comparison never see injected errors
// while the fault generator's sequence stays untouched.
type switchStore struct {
	faulty, clean adapters.Store
	on            atomic.Bool
}

func (s *switchStore) pick() adapters.Store {
	if s.on.Load() {
		return s.faulty
	}
	return s.clean
}

func (s *switchStore) Get(ctx context.Context, ks adapters.Keyspace, keys [][]byte) ([]adapters.Record, error) {
	return s.pick().Get(ctx, ks, keys)
}

func (s *switchStore) GetRange(ctx context.Context, ks adapters.Keyspace, start, end []byte, limit int) ([]adapters.Record, bool, error) {
	return s.pick().GetRange(ctx, ks, start, end, limit)
}

func (s *switchStore) Upsert(ctx context.Context, ks adapters.Keyspace, ws []adapters.Write) ([]adapters.Version, error) {
	return s.pick().Upsert(ctx, ks, ws)
}

func (s *switchStore) Delete(ctx context.Context, ks adapters.Keyspace, ws []adapters.Write) error {
	return s.pick().Delete(ctx, ks, ws)
}

// memStore is a minimal in-memory adapters.Store for the fuzzer and the
// memory measurement, where opening bbolt per input would dominate. It keeps
// the embedded store's contract: empty keys are invalid, a present empty
// value is non-nil, more is exact.
type memStore struct {
	mu     sync.Mutex
	spaces map[adapters.Keyspace][]adapters.Record // sorted by key, with versions
	seq    uint64
}

func newMemStore() *memStore { return &memStore{spaces: map[adapters.Keyspace][]adapters.Record{}} }

func (m *memStore) find(ks adapters.Keyspace, k []byte) (int, bool) {
	recs := m.spaces[ks]
	i := sort.Search(len(recs), func(i int) bool { return bytes.Compare(recs[i].Key, k) >= 0 })
	return i, i < len(recs) && bytes.Equal(recs[i].Key, k)
}

func writeKeys(ws []adapters.Write) [][]byte {
	keys := make([][]byte, len(ws))
	for i, w := range ws {
		keys[i] = w.Key
	}
	return keys
}

func validKeys(keys [][]byte) error {
	for _, k := range keys {
		if len(k) == 0 {
			return adapters.ErrInvalid
		}
	}
	return nil
}

func (m *memStore) Get(_ context.Context, ks adapters.Keyspace, keys [][]byte) ([]adapters.Record, error) {
	if err := validKeys(keys); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]adapters.Record, len(keys))
	for i, k := range keys {
		out[i].Key = k
		if j, ok := m.find(ks, k); ok {
			r := m.spaces[ks][j]
			out[i].Value, out[i].Version = append([]byte{}, r.Value...), r.Version
		}
	}
	return out, nil
}

func (m *memStore) GetRange(_ context.Context, ks adapters.Keyspace, start, end []byte, limit int) ([]adapters.Record, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []adapters.Record
	i, _ := m.find(ks, start)
	for recs := m.spaces[ks]; i < len(recs) && (end == nil || bytes.Compare(recs[i].Key, end) < 0); i++ {
		if limit > 0 && len(out) == limit {
			return out, true, nil
		}
		out = append(out, adapters.Record{Key: bytes.Clone(recs[i].Key), Value: append([]byte{}, recs[i].Value...), Version: recs[i].Version})
	}
	return out, false, nil
}

// precondition checks w against the key's state; m.mu is held.
func (m *memStore) precondition(ks adapters.Keyspace, i int, w adapters.Write) (adapters.Conflict, bool) {
	j, exists := m.find(ks, w.Key)
	var cur adapters.Version
	if exists {
		cur = m.spaces[ks][j].Version
	}
	switch w.Expect.Kind {
	case adapters.ExpectAbsent:
		if !exists {
			return adapters.Conflict{}, true
		}
	case adapters.ExpectVersion:
		if exists && cur == w.Expect.Version {
			return adapters.Conflict{}, true
		}
	default:
		return adapters.Conflict{}, true
	}
	return adapters.Conflict{Index: i, Key: w.Key, Exists: exists, Current: cur}, false
}

func (m *memStore) Upsert(_ context.Context, ks adapters.Keyspace, writes []adapters.Write) ([]adapters.Version, error) {
	if err := validKeys(writeKeys(writes)); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	vers := make([]adapters.Version, len(writes))
	var conflicts []adapters.Conflict
	for n, w := range writes {
		if c, ok := m.precondition(ks, n, w); !ok {
			conflicts = append(conflicts, c)
			continue
		}
		m.seq++
		vers[n] = adapters.Version(strconv.FormatUint(m.seq, 10))
		rec := adapters.Record{Key: bytes.Clone(w.Key), Value: append([]byte{}, w.Value...), Version: vers[n]}
		if i, ok := m.find(ks, w.Key); ok {
			m.spaces[ks][i] = rec
		} else {
			m.spaces[ks] = slices.Insert(m.spaces[ks], i, rec)
		}
	}
	if len(conflicts) > 0 {
		return vers, &adapters.ConflictError{Conflicts: conflicts}
	}
	return vers, nil
}

func (m *memStore) Delete(_ context.Context, ks adapters.Keyspace, writes []adapters.Write) error {
	if err := validKeys(writeKeys(writes)); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var conflicts []adapters.Conflict
	for n, w := range writes {
		if c, ok := m.precondition(ks, n, w); !ok {
			conflicts = append(conflicts, c)
			continue
		}
		if i, ok := m.find(ks, w.Key); ok {
			m.spaces[ks] = slices.Delete(m.spaces[ks], i, i+1)
		}
	}
	if len(conflicts) > 0 {
		return &adapters.ConflictError{Conflicts: conflicts}
	}
	return nil
}

// condWrite is a single-key write made the way a transaction makes one
// (txn Insert, Update, Upsert): check the write, X-lock the key (Always:
// blind; else learning whether it exists, from the buffer or with one
// fetch), check cond, Apply, and release the lock.
func condWrite(ctx context.Context, b *Buffer, ks adapters.Keyspace, w Write, cond Cond) error {
	if err := b.ValidateWrite(ks, w.Key, w.Value); err != nil {
		return err
	}
	o := &Owner{ID: condWriter.Add(1)}
	defer b.Release(o)
	if cond == Always {
		if err := b.LockKeyBlind(ks, w.Key, o); err != nil {
			return err
		}
		return b.Apply(ctx, ks, []Write{w})
	}
	_, exists, _, err := b.LockKey(ctx, ks, w.Key, o, ModeX)
	if err != nil {
		return err
	}
	switch {
	case cond == MustNotExist && exists:
		return fmt.Errorf("%w: %q", ErrExists, w.Key)
	case cond == MustExist && !exists:
		return fmt.Errorf("%w: %q", ErrNotFound, w.Key)
	}
	return b.Apply(ctx, ks, []Write{w})
}

var condWriter atomic.Uint64
