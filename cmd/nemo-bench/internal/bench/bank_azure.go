package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
)

// The bank's accounts on the azure target: one partition of the items'
// table (the Table API's transactions are entity group transactions,
// within one partition), each account's balance in property N.
const azBankPartition = "bank"

func azBankEntity(i int, n int64) []byte {
	return fmt.Appendf(nil, `{"PartitionKey":%q,"RowKey":%q,"N":%d}`, azBankPartition, bankName(i), n)
}

// tableClient is the SDK's client of the run's table at addr; retries
// -1 turns the SDK's retries off.
func (d *azureData) tableClient(addr string, retries int32) (*aztables.Client, error) {
	u, err := url.Parse(d.url)
	if err != nil {
		return nil, err
	}
	cred, err := aztables.NewSharedKeyCredential(d.account, devKey)
	if err != nil {
		return nil, err
	}
	var opts *aztables.ClientOptions
	if retries != 0 {
		opts = &aztables.ClientOptions{ClientOptions: azcore.ClientOptions{Retry: policy.RetryOptions{MaxRetries: retries}}}
	}
	svc, err := aztables.NewServiceClientWithSharedKey(u.Scheme+"://"+addr+u.Path, cred, opts)
	if err != nil {
		return nil, err
	}
	return svc.NewClient(d.table), nil
}

func (d *azureData) bankClient(_ context.Context, addr string, sent *atomic.Uint64) (bankClient, func() error, error) {
	c, err := d.tableClient(addr, 0)
	if err != nil {
		return nil, nil, err
	}
	return azureBank{c: c, sent: sent}, func() error { return nil }, nil
}

func (d *azureData) bankReset(ctx context.Context) error {
	c := d.direct.NewClient(d.table)
	var acts []aztables.TransactionAction
	for i := range bankAccounts {
		acts = append(acts, aztables.TransactionAction{ActionType: aztables.TransactionTypeInsertReplace, Entity: azBankEntity(i, bankInitial)})
		if len(acts) == 100 || i == bankAccounts-1 {
			if _, err := c.SubmitTransaction(ctx, acts, nil); err != nil {
				return err
			}
			acts = acts[:0]
		}
	}
	return nil
}

func (d *azureData) bankTotal(ctx context.Context) (int, int64, error) {
	var sent atomic.Uint64
	return azureBank{c: d.direct.NewClient(d.table), sent: &sent}.audit(ctx)
}

// azureBank is a bank client through the aztables SDK.
type azureBank struct {
	c    *aztables.Client
	sent *atomic.Uint64
}

func (b azureBank) read(ctx context.Context, i int) (int64, azcore.ETag, error) {
	b.sent.Add(1)
	resp, err := b.c.GetEntity(ctx, azBankPartition, bankName(i), nil)
	if err != nil {
		return 0, "", err
	}
	var m struct{ N int64 }
	err = json.Unmarshal(resp.Value, &m)
	return m.N, resp.ETag, err
}

// transfer reads both accounts and submits both updates in one entity
// group transaction, each conditioned on the ETag read: a refused batch
// (412, or a 202 whose changeset answers 412 or 409, as Azure answers
// it) moved nothing.
func (b azureBank) transfer(ctx context.Context, from, to int, amount int64) (bool, error) {
	nf, ef, err := b.read(ctx, from)
	if err != nil {
		return false, err
	}
	nt, et, err := b.read(ctx, to)
	if err != nil {
		return false, err
	}
	b.sent.Add(1)
	_, err = b.c.SubmitTransaction(ctx, []aztables.TransactionAction{
		{ActionType: aztables.TransactionTypeUpdateReplace, Entity: azBankEntity(from, nf-amount), IfMatch: &ef},
		{ActionType: aztables.TransactionTypeUpdateReplace, Entity: azBankEntity(to, nt+amount), IfMatch: &et},
	}, nil)
	var re *azcore.ResponseError
	if errors.As(err, &re) && (re.StatusCode == http.StatusPreconditionFailed || re.StatusCode == http.StatusConflict ||
		re.StatusCode == http.StatusAccepted && (strings.Contains(err.Error(), "412 Precondition Failed") || strings.Contains(err.Error(), "409 Conflict"))) {
		return false, nil
	}
	return err == nil, err
}

// audit sums the accounts' partition in one query (following its
// continuations).
func (b azureBank) audit(ctx context.Context) (int, int64, error) {
	filter := "PartitionKey eq '" + azBankPartition + "'"
	pager := b.c.NewListEntitiesPager(&aztables.ListEntitiesOptions{Filter: &filter})
	n, total := 0, int64(0)
	for pager.More() {
		b.sent.Add(1)
		page, err := pager.NextPage(ctx)
		if err != nil {
			return 0, 0, err
		}
		for _, raw := range page.Entities {
			var m struct{ N int64 }
			if err := json.Unmarshal(raw, &m); err != nil {
				return 0, 0, err
			}
			n, total = n+1, total+m.N
		}
	}
	return n, total, nil
}

// The take-over experiment's keys on the azure target: one partition of
// the items' table per run.
func azSeqPartition(run string) string { return "takeover-" + run }

func (d *azureData) seqWriter(_ context.Context, addr, run string, sent *atomic.Uint64) (seqWriter, func() error, error) {
	c, err := d.tableClient(addr, -1)
	if err != nil {
		return nil, nil, err
	}
	return azureSeq{c: c, pk: azSeqPartition(run), sent: sent}, func() error { return nil }, nil
}

func (d *azureData) seqRead(ctx context.Context, run string, keys []string) (map[string]int64, error) {
	c := d.direct.NewClient(d.table)
	filter := "PartitionKey eq '" + azSeqPartition(run) + "'"
	pager := c.NewListEntitiesPager(&aztables.ListEntitiesOptions{Filter: &filter})
	out := make(map[string]int64, len(keys))
	for _, k := range keys {
		out[k] = -1
	}
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, raw := range page.Entities {
			var m struct {
				RowKey string
				N      int64
			}
			if err := json.Unmarshal(raw, &m); err != nil {
				return nil, err
			}
			out[m.RowKey] = m.N
		}
	}
	return out, nil
}

type azureSeq struct {
	c    *aztables.Client
	pk   string
	sent *atomic.Uint64
}

func (s azureSeq) upsert(ctx context.Context, key string, seq int64) error {
	s.sent.Add(1)
	ent := fmt.Appendf(nil, `{"PartitionKey":%q,"RowKey":%q,"N":%d}`, s.pk, key, seq)
	_, err := s.c.UpsertEntity(ctx, ent, &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace})
	return err
}
