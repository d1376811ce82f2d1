package embedded

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/nemocache/nemo/adapters"
)

// FileName is the name of the database file inside the data directory.
const FileName = "nemo.db"

// lockTimeout bounds the wait for bbolt's exclusive file lock, so a second
// process opening the same data directory fails instead of hanging.
const lockTimeout = 2 * time.Second

// Options configure Open.
type Options struct {
	// NoSync skips fsync on commit: faster, but a crash may lose recent
	// writes. For benchmarks only; the default is durable.
	NoSync bool
	// InMemory keeps the store in memory (memFile): Open's dir is not
	// used and no file is created; everything is gone once the store is
	// closed. Writes are not synced (there is nothing to sync to).
	InMemory bool
	// Logger receives open/close events; nil means slog.Default().
	Logger *slog.Logger
}

// Store is an adapters.Store over a bbolt database. Safe for concurrent use.
type Store struct {
	db       *bolt.DB
	log      *slog.Logger
	inMemory bool
	closed   atomic.Bool
}

var (
	_ adapters.Store        = (*Store)(nil)
	_ adapters.AtomicWriter = (*Store)(nil)
)

// Open opens (creating if needed) the store in dir.
func Open(dir string, opts Options) (*Store, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if opts.InMemory {
		return openInMemory(log)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded: create data dir: %w", err)
	}
	path := filepath.Join(dir, FileName)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockTimeout, NoSync: opts.NoSync})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("embedded: %s is locked (another nemo using this data dir?): %w", path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("embedded: open %s: %w", path, err)
	}
	log.Info("embedded store opened", "path", path, "nosync", opts.NoSync)
	return &Store{db: db, log: log}, nil
}

// openInMemory opens an empty store in an anonymous memory file.
func openInMemory(log *slog.Logger) (*Store, error) {
	const name = "nemo-embedded"
	f, err := memFile(name)
	if err != nil {
		return nil, err
	}
	open := func(string, int, os.FileMode) (*os.File, error) { return f, nil }
	db, err := bolt.Open(f.Name(), 0o600, &bolt.Options{Timeout: lockTimeout, NoSync: true, OpenFile: open})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("embedded: open in memory: %w", err), f.Close())
	}
	log.Info("embedded store opened in memory: no file; its data is gone when nemo exits")
	return &Store{db: db, log: log, inMemory: true}, nil
}

// InMemory reports whether the store is kept in memory (Options.InMemory).
func (s *Store) InMemory() bool { return s.inMemory }

// Reset empties the store: every keyspace and its records. The version
// sequence is kept, so a version handed out before is never handed out
// again (an ETag a client kept cannot match a later write's).
func (s *Store) Reset(ctx context.Context) error {
	if s.closed.Load() {
		return adapters.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.update(func(tx *bolt.Tx) error {
		var names [][]byte
		err := tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
			if string(name) != metaBucket {
				names = append(names, clone(name))
			}
			return nil
		})
		for _, name := range names {
			if err == nil {
				err = tx.DeleteBucket(name)
			}
		}
		return err
	})
}

// Close closes the database, waiting for in-flight calls. Later calls fail
// with adapters.ErrClosed; closing twice is a no-op.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	path := s.db.Path() // bbolt forgets it on close
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("embedded: close: %w", err)
	}
	s.log.Info("embedded store closed", "path", path)
	return nil
}

// Versions: one sequence for the whole store (bbolt's NextSequence of the
// metaBucket, so a keyspace dropped and created again never repeats a
// version), and each write of a key stores the next value of it,
// big-endian, under the key in the keyspace's version bucket (a top-level
// bucket named versionPrefix+keyspace). Keyspaces lists neither. A key
// written before versions existed has none recorded and reports version
// "0", which no write produces.
const (
	versionPrefix = "\x00v/"
	metaBucket    = "\x00meta"
)

func versionBucket(ks adapters.Keyspace) []byte { return []byte(versionPrefix + string(ks)) }

// versionOf is the version of key k, present in b: from vb (may be nil).
func versionOf(vb *bolt.Bucket, k []byte) adapters.Version {
	if vb != nil {
		if v := vb.Get(k); len(v) == 8 {
			return adapters.Version(strconv.FormatUint(binary.BigEndian.Uint64(v), 10))
		}
	}
	return "0"
}

// Get implements adapters.Store.
func (s *Store) Get(ctx context.Context, ks adapters.Keyspace, keys [][]byte) ([]adapters.Record, error) {
	if err := s.check(ctx, ks, keys); err != nil {
		return nil, err
	}
	out := make([]adapters.Record, len(keys))
	for i, k := range keys {
		out[i].Key = k
	}
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(ks))
		if b == nil {
			return nil
		}
		vb := tx.Bucket(versionBucket(ks))
		c := b.Cursor()
		for i, k := range keys {
			// A cursor, not b.Get, so a present empty value is told
			// apart from absence regardless of how bbolt stores it.
			if ck, v := c.Seek(k); bytes.Equal(ck, k) {
				out[i].Value = clone(v)
				out[i].Version = versionOf(vb, k)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// rangeIn lists the keys and versions in [start, end) of bucket b (nil: no
// records).
func rangeIn(b, vb *bolt.Bucket, start, end []byte) []adapters.Record {
	if b == nil {
		return nil
	}
	var out []adapters.Record
	c := b.Cursor()
	for k, _ := c.Seek(start); k != nil && (end == nil || bytes.Compare(k, end) < 0); k, _ = c.Next() {
		out = append(out, adapters.Record{Key: clone(k), Version: versionOf(vb, k)})
	}
	return out
}

// GetRange implements adapters.Store. more is exact: it is true only when
// another record in [start, end) follows the last one returned.
func (s *Store) GetRange(ctx context.Context, ks adapters.Keyspace, start, end []byte, limit int) ([]adapters.Record, bool, error) {
	if err := s.check(ctx, ks, nil); err != nil {
		return nil, false, err
	}
	if end != nil && bytes.Compare(start, end) >= 0 {
		return nil, false, nil
	}
	var recs []adapters.Record
	var more bool
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(ks))
		if b == nil {
			return nil
		}
		vb := tx.Bucket(versionBucket(ks))
		c := b.Cursor()
		k, v := c.First()
		if len(start) > 0 {
			k, v = c.Seek(start)
		}
		for ; k != nil && (end == nil || bytes.Compare(k, end) < 0); k, v = c.Next() {
			if limit > 0 && len(recs) == limit {
				more = true
				break
			}
			recs = append(recs, adapters.Record{Key: clone(k), Value: clone(v), Version: versionOf(vb, k)})
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	return recs, more, nil
}

// Upsert implements adapters.Store in one transaction: the writes whose
// preconditions hold are applied, each gets a new version, and the others
// are reported in a *adapters.ConflictError.
func (s *Store) Upsert(ctx context.Context, ks adapters.Keyspace, writes []adapters.Write) ([]adapters.Version, error) {
	if err := s.checkWrites(ctx, ks, writes); err != nil {
		return nil, err
	}
	for i, w := range writes {
		if int64(len(w.Value)) > bolt.MaxValueSize {
			return nil, fmt.Errorf("embedded: value %d has %d bytes: %w", i, len(w.Value), adapters.ErrInvalid)
		}
	}
	if len(writes) == 0 {
		return nil, nil
	}
	vers := make([]adapters.Version, len(writes))
	var conflicts []adapters.Conflict
	err := s.update(func(tx *bolt.Tx) error {
		conflicts = conflicts[:0]
		b, vb, meta, err := writeBuckets(tx, ks)
		if err != nil {
			return err
		}
		for i, w := range writes {
			vers[i] = ""
			if c, ok := precondition(b, vb, i, w); !ok {
				conflicts = append(conflicts, c)
				continue
			}
			v, err := putVersioned(b, vb, meta, w.Key, w.Value)
			if err != nil {
				return err
			}
			vers[i] = v
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(conflicts) > 0 {
		return vers, &adapters.ConflictError{Conflicts: conflicts}
	}
	return vers, nil
}

// Delete implements adapters.Store in one transaction, with the same
// precondition rules as Upsert.
func (s *Store) Delete(ctx context.Context, ks adapters.Keyspace, writes []adapters.Write) error {
	if err := s.checkWrites(ctx, ks, writes); err != nil {
		return err
	}
	if len(writes) == 0 {
		return nil
	}
	var conflicts []adapters.Conflict
	err := s.update(func(tx *bolt.Tx) error {
		conflicts = conflicts[:0]
		b := tx.Bucket([]byte(ks))
		vb := tx.Bucket(versionBucket(ks))
		for i, w := range writes {
			if c, ok := precondition(b, vb, i, w); !ok {
				conflicts = append(conflicts, c)
				continue
			}
			if b == nil {
				continue
			}
			if err := b.Delete(w.Key); err != nil {
				return err
			}
			if vb != nil {
				if err := vb.Delete(w.Key); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(conflicts) > 0 {
		return &adapters.ConflictError{Conflicts: conflicts}
	}
	return nil
}

// WriteAtomic implements adapters.AtomicWriter in one bbolt update
// transaction: every precondition is checked first, against the state
// before the call; if any fails, the transaction is rolled back and the
// error is a *adapters.ConflictError naming every refused mutation.
// Otherwise the upserts are stored, each with a new version from the
// store-wide sequence (as Upsert does), and the deletes applied (an
// ExpectAny delete of an absent key is fine). A group naming one key twice
// is refused with adapters.ErrInvalid, as Azure and Datastore refuse it.
func (s *Store) WriteAtomic(ctx context.Context, ks adapters.Keyspace, ms []adapters.Mutation) ([]adapters.Version, error) {
	keys := make([][]byte, len(ms))
	for i, m := range ms {
		keys[i] = m.Key
	}
	if err := s.check(ctx, ks, keys); err != nil {
		return nil, err
	}
	if err := distinctKeys(ms); err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	if err := checkGroup(ms); err != nil {
		return nil, err
	}
	if len(ms) == 0 {
		return nil, nil
	}
	vers := make([]adapters.Version, len(ms))
	var conflicts []adapters.Conflict
	errRefused := errors.New("refused") // rolls the transaction back
	err := s.update(func(tx *bolt.Tx) error {
		clear(vers)
		conflicts = groupConflicts(tx.Bucket([]byte(ks)), tx.Bucket(versionBucket(ks)), ms, conflicts[:0])
		if len(conflicts) > 0 {
			return errRefused
		}
		return applyGroup(tx, ks, ms, vers)
	})
	if len(conflicts) > 0 {
		return nil, &adapters.ConflictError{Conflicts: conflicts}
	}
	if err != nil {
		return nil, err
	}
	return vers, nil
}

// checkGroup refuses a group with a value bolt cannot hold or a
// precondition it does not know.
func checkGroup(ms []adapters.Mutation) error {
	for i, m := range ms {
		if !m.Delete && !m.Check && int64(len(m.Value)) > bolt.MaxValueSize {
			return fmt.Errorf("embedded: value %d has %d bytes: %w", i, len(m.Value), adapters.ErrInvalid)
		}
		if m.Expect.Kind > adapters.ExpectVersion {
			return fmt.Errorf("embedded: mutation %d: unknown precondition %d: %w", i, m.Expect.Kind, adapters.ErrInvalid)
		}
	}
	return nil
}

// groupConflicts appends to conflicts every mutation of ms whose
// precondition or range check fails against b and vb (nil: no bucket).
func groupConflicts(b, vb *bolt.Bucket, ms []adapters.Mutation, conflicts []adapters.Conflict) []adapters.Conflict {
	for i, m := range ms {
		if m.Range != nil {
			if got := rangeIn(b, vb, m.Key, m.Range.End); !adapters.SameRange(got, m.Range.Records) {
				conflicts = append(conflicts, adapters.Conflict{Index: i, Key: m.Key, Exists: len(got) > 0})
			}
			continue
		}
		if c, ok := precondition(b, vb, i, m.Write); !ok {
			conflicts = append(conflicts, c)
		}
	}
	return conflicts
}

// writeBuckets returns, creating them if need be, the buckets a write to
// ks uses: its records, their versions, and the store-wide metadata.
func writeBuckets(tx *bolt.Tx, ks adapters.Keyspace) (b, vb, meta *bolt.Bucket, err error) {
	if b, err = tx.CreateBucketIfNotExists([]byte(ks)); err != nil {
		return nil, nil, nil, err
	}
	if vb, err = tx.CreateBucketIfNotExists(versionBucket(ks)); err != nil {
		return nil, nil, nil, err
	}
	if meta, err = tx.CreateBucketIfNotExists([]byte(metaBucket)); err != nil {
		return nil, nil, nil, err
	}
	return b, vb, meta, nil
}

// applyGroup stores ms's upserts, each with a new version from the
// store-wide sequence (into vers), and applies its deletes; checks are
// skipped (groupConflicts verified them).
func applyGroup(tx *bolt.Tx, ks adapters.Keyspace, ms []adapters.Mutation, vers []adapters.Version) error {
	b, vb, meta, err := writeBuckets(tx, ks)
	if err != nil {
		return err
	}
	for i, m := range ms {
		if m.Check {
			continue
		}
		if m.Delete {
			if err := b.Delete(m.Key); err != nil {
				return err
			}
			if err := vb.Delete(m.Key); err != nil {
				return err
			}
			continue
		}
		v, err := putVersioned(b, vb, meta, m.Key, m.Value)
		if err != nil {
			return err
		}
		vers[i] = v
	}
	return nil
}

// putVersioned stores value under key in b with a new version from the
// store-wide sequence in meta, recorded in vb, and returns that version.
func putVersioned(b, vb, meta *bolt.Bucket, key, value []byte) (adapters.Version, error) {
	seq, err := meta.NextSequence()
	if err != nil {
		return "", err
	}
	if err := b.Put(key, value); err != nil {
		return "", err
	}
	if err := vb.Put(key, binary.BigEndian.AppendUint64(nil, seq)); err != nil {
		return "", err
	}
	return adapters.Version(strconv.FormatUint(seq, 10)), nil
}

// distinctKeys refuses a group naming one key twice.
func distinctKeys(ms []adapters.Mutation) error {
	seen := make(map[string]int, len(ms))
	for i, m := range ms {
		if m.Range != nil {
			continue // a range check names its start, which a write may name too
		}
		if j, dup := seen[string(m.Key)]; dup {
			return fmt.Errorf("mutations %d and %d both name key %q: %w", j, i, m.Key, adapters.ErrInvalid)
		}
		seen[string(m.Key)] = i
	}
	return nil
}

// precondition checks write i against the key's state in b (nil: the
// keyspace has no bucket, so every key is absent).
func precondition(b, vb *bolt.Bucket, i int, w adapters.Write) (adapters.Conflict, bool) {
	if w.Expect.Kind == adapters.ExpectAny {
		return adapters.Conflict{}, true
	}
	exists := false
	var cur adapters.Version
	if b != nil {
		if k, _ := b.Cursor().Seek(w.Key); bytes.Equal(k, w.Key) {
			exists, cur = true, versionOf(vb, w.Key)
		}
	}
	switch {
	case w.Expect.Kind == adapters.ExpectAbsent && !exists,
		w.Expect.Kind == adapters.ExpectVersion && exists && cur == w.Expect.Version:
		return adapters.Conflict{}, true
	}
	return adapters.Conflict{Index: i, Key: w.Key, Exists: exists, Current: cur}, false
}

func (s *Store) checkWrites(ctx context.Context, ks adapters.Keyspace, writes []adapters.Write) error {
	keys := make([][]byte, len(writes))
	for i, w := range writes {
		keys[i] = w.Key
	}
	return s.check(ctx, ks, keys)
}

// Keyspaces lists the keyspaces holding (or having held) data, in byte
// order.
func (s *Store) Keyspaces() ([]adapters.Keyspace, error) {
	if s.closed.Load() {
		return nil, adapters.ErrClosed
	}
	var out []adapters.Keyspace
	err := s.view(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
			if len(name) > 0 && name[0] == 0 {
				return nil // versions and the sequence, not keyspaces
			}
			out = append(out, adapters.Keyspace(name)) // string conversion copies
			return nil
		})
	})
	return out, err
}

// ListKeyspaces implements adapters.KeyspaceLister: the keyspaces whose
// names start with prefix, from Keyspaces.
func (s *Store) ListKeyspaces(ctx context.Context, prefix string) ([]adapters.Keyspace, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	all, err := s.Keyspaces()
	if err != nil {
		return nil, err
	}
	var out []adapters.Keyspace
	for _, ks := range all {
		if strings.HasPrefix(string(ks), prefix) {
			out = append(out, ks)
		}
	}
	return out, nil
}

// CreateKeyspace implements adapters.KeyspaceAdmin: it creates the
// keyspace's bucket (an existing one is kept as it is).
func (s *Store) CreateKeyspace(ctx context.Context, ks adapters.Keyspace) error {
	if err := s.check(ctx, ks, nil); err != nil {
		return err
	}
	return s.update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists([]byte(ks))
		return err
	})
}

// DropKeyspace implements adapters.KeyspaceAdmin: it deletes a keyspace and
// all its records; an absent keyspace is not an error.
func (s *Store) DropKeyspace(ctx context.Context, ks adapters.Keyspace) error {
	if err := s.check(ctx, ks, nil); err != nil {
		return err
	}
	return s.update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{[]byte(ks), versionBucket(ks)} {
			if err := tx.DeleteBucket(name); err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
				return err
			}
		}
		return nil
	})
}

// clone copies b out of bbolt's memory map; the result is never nil, so a
// present empty value stays distinguishable from absence.
func clone(b []byte) []byte {
	out := make([]byte, len(b))
	copy(out, b)
	return out
}

// check validates a call before any work is done.
func (s *Store) check(ctx context.Context, ks adapters.Keyspace, keys [][]byte) error {
	if s.closed.Load() {
		return adapters.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if ks == "" || len(ks) > bolt.MaxKeySize-len(versionPrefix) {
		return fmt.Errorf("embedded: keyspace of %d bytes: %w", len(ks), adapters.ErrInvalid)
	}
	if ks[0] == 0 {
		return fmt.Errorf("embedded: keyspace %q: a leading zero byte is reserved: %w", ks, adapters.ErrInvalid)
	}
	for i, k := range keys {
		if len(k) == 0 || len(k) > bolt.MaxKeySize {
			return fmt.Errorf("embedded: key %d has %d bytes: %w", i, len(k), adapters.ErrInvalid)
		}
	}
	return nil
}

func (s *Store) view(fn func(*bolt.Tx) error) error   { return mapErr(s.db.View(fn)) }
func (s *Store) update(fn func(*bolt.Tx) error) error { return mapErr(s.db.Update(fn)) }

// mapErr turns bbolt's "not open" (a Close raced the call) into
// adapters.ErrClosed and labels everything else.
func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, bolterrors.ErrDatabaseNotOpen):
		return adapters.ErrClosed
	default:
		return fmt.Errorf("embedded: %w", err)
	}
}
