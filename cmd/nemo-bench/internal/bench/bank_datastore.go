package bench

import (
	"context"
	"errors"
	"sync/atomic"

	"cloud.google.com/go/datastore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The bank's accounts on the emulator target: kind dsBankKind in the
// items' project, each account's balance in property N, all children of
// one parent key (one entity group, as the azure target's accounts are
// one partition): the legacy Datastore emulator refuses a transaction
// over more than 25 entity groups, so an audit in a transaction could
// not read 1,000 root entities.
const dsBankKind = "Account"

type dsAccount struct{ N int64 }

var dsBankParent = datastore.NameKey("Bank", "bank", nil)

func dsBankKey(i int) *datastore.Key { return datastore.NameKey(dsBankKind, bankName(i), dsBankParent) }

func dsBankKeys() []*datastore.Key {
	keys := make([]*datastore.Key, bankAccounts)
	for i := range keys {
		keys[i] = dsBankKey(i)
	}
	return keys
}

func (d *datastoreData) bankClient(ctx context.Context, addr string, sent *atomic.Uint64) (bankClient, func() error, error) {
	c, err := dsClient(ctx, addr, d.project)
	if err != nil {
		return nil, nil, err
	}
	return datastoreBank{c: c, sent: sent}, c.Close, nil
}

func (d *datastoreData) bankReset(ctx context.Context) error {
	keys := dsBankKeys()
	accs := make([]dsAccount, len(keys))
	for i := range accs {
		accs[i].N = bankInitial
	}
	for i := 0; i < len(keys); i += 500 {
		j := min(i+500, len(keys))
		if _, err := d.direct.PutMulti(ctx, keys[i:j], accs[i:j]); err != nil {
			return err
		}
	}
	return nil
}

func (d *datastoreData) bankTotal(ctx context.Context) (int, int64, error) {
	accs := make([]dsAccount, bankAccounts)
	if err := d.direct.GetMulti(ctx, dsBankKeys(), accs); err != nil {
		return 0, 0, err
	}
	var total int64
	for _, a := range accs {
		total += a.N
	}
	return len(accs), total, nil
}

// datastoreBank is a bank client through the Go Datastore client.
type datastoreBank struct {
	c    *datastore.Client
	sent *atomic.Uint64
}

// conflicted reports whether err is a transaction's conflict: the
// client's ErrConcurrentTransaction, or ABORTED anywhere in its chain.
func conflicted(err error) bool {
	if errors.Is(err, datastore.ErrConcurrentTransaction) {
		return true
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		if status.Code(e) == codes.Aborted {
			return true
		}
	}
	return false
}

// transfer is a read-write transaction: begin, look both accounts up,
// put both, commit (four requests with the rollback of a failed one);
// ABORTED (a conflict) moved nothing.
func (b datastoreBank) transfer(ctx context.Context, from, to int, amount int64) (bool, error) {
	b.sent.Add(1)
	tx, err := b.c.NewTransaction(ctx)
	if err != nil {
		return false, err
	}
	keys := []*datastore.Key{dsBankKey(from), dsBankKey(to)}
	accs := make([]dsAccount, 2)
	b.sent.Add(1)
	if err = tx.GetMulti(keys, accs); err == nil {
		accs[0].N, accs[1].N = accs[0].N-amount, accs[1].N+amount
		if _, err = tx.PutMulti(keys, accs); err == nil {
			b.sent.Add(1)
			_, err = tx.Commit()
			if conflicted(err) {
				return false, nil
			}
			return err == nil, err
		}
	}
	b.sent.Add(1)
	_ = tx.Rollback()
	if conflicted(err) {
		return false, nil
	}
	return false, err
}

// audit reads every account in a read-only transaction.
func (b datastoreBank) audit(ctx context.Context) (int, int64, error) {
	b.sent.Add(1)
	tx, err := b.c.NewTransaction(ctx, datastore.ReadOnly)
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		b.sent.Add(1)
		_ = tx.Rollback()
	}()
	accs := make([]dsAccount, bankAccounts)
	b.sent.Add(1)
	if err := tx.GetMulti(dsBankKeys(), accs); err != nil {
		return 0, 0, err
	}
	var total int64
	for _, a := range accs {
		total += a.N
	}
	return len(accs), total, nil
}

// The take-over experiment's keys on the emulator target: kind
// "Takeover" in the items' project, named by run.
const dsSeqKind = "Takeover"

func dsSeqKey(run, key string) *datastore.Key { return datastore.NameKey(dsSeqKind, run+"-"+key, nil) }

func (d *datastoreData) seqWriter(ctx context.Context, addr, run string, sent *atomic.Uint64) (seqWriter, func() error, error) {
	c, err := dsClient(ctx, addr, d.project)
	if err != nil {
		return nil, nil, err
	}
	return datastoreSeq{c: c, run: run, sent: sent}, c.Close, nil
}

func (d *datastoreData) seqRead(ctx context.Context, run string, keys []string) (map[string]int64, error) {
	out := make(map[string]int64, len(keys))
	for i := 0; i < len(keys); i += 500 {
		ks := keys[i:min(i+500, len(keys))]
		dks := make([]*datastore.Key, len(ks))
		for j, k := range ks {
			dks[j] = dsSeqKey(run, k)
		}
		got := make([]dsAccount, len(ks))
		err := d.direct.GetMulti(ctx, dks, got)
		var me datastore.MultiError
		if err != nil && !errors.As(err, &me) {
			return nil, err
		}
		for j, k := range ks {
			out[k] = got[j].N
			if me != nil && me[j] != nil {
				if !errors.Is(me[j], datastore.ErrNoSuchEntity) {
					return nil, me[j]
				}
				out[k] = -1
			}
		}
	}
	return out, nil
}

type datastoreSeq struct {
	c    *datastore.Client
	run  string
	sent *atomic.Uint64
}

func (s datastoreSeq) upsert(ctx context.Context, key string, seq int64) error {
	s.sent.Add(1)
	_, err := s.c.Put(ctx, dsSeqKey(s.run, key), &dsAccount{N: seq})
	return err
}
