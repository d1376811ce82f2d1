package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"cloud.google.com/go/datastore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/nemocache/nemo/config"
)

// The clients of the coherence tests: each implements cohKV for one
// dialect, through a nemo replica or directly against the backend.

// ---- Azure ----

type cohAzKV struct {
	label string
	tc    *aztables.Client
}

func azService(t *testing.T, conn string) *aztables.ServiceClient {
	t.Helper()
	// No SDK retries: a retried insert whose first attempt landed would
	// report a refusal for a write that happened.
	svc, err := aztables.NewServiceClientFromConnectionString(conn, &aztables.ClientOptions{
		ClientOptions: azcore.ClientOptions{Retry: policy.RetryOptions{MaxRetries: -1}}})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

func azNemoService(t *testing.T, p *proc) *aztables.ServiceClient {
	azAddr, _ := frontendAddrs(t, p)
	def := config.Defaults().Frontend.Azure
	return azService(t, fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;TableEndpoint=http://%s/%s;",
		def.Account, def.Key, azAddr, def.Account))
}

func splitKey(key string) (string, string) {
	pk, rk, _ := strings.Cut(key, "/")
	return pk, rk
}

func cohAzEntity(key, val string) []byte {
	pk, rk := splitKey(key)
	b, _ := json.Marshal(map[string]string{"PartitionKey": pk, "RowKey": rk, "V": val})
	return b
}

func azValue(b []byte) string {
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		return "<undecodable " + string(b) + ">"
	}
	s, _ := m["V"].(string)
	return s
}

func (a *cohAzKV) name() string { return a.label }

func (a *cohAzKV) get(ctx context.Context, key string) (string, string, error) {
	pk, rk := splitKey(key)
	resp, err := a.tc.GetEntity(ctx, pk, rk, nil)
	if err != nil {
		return "", "", err
	}
	return azValue(resp.Value), string(resp.ETag), nil
}

func (a *cohAzKV) query(ctx context.Context, key string) (string, error) {
	pk, rk := splitKey(key)
	f := fmt.Sprintf("PartitionKey eq '%s' and RowKey eq '%s'", pk, rk)
	pager := a.tc.NewListEntitiesPager(&aztables.ListEntitiesOptions{Filter: &f})
	var vals []string
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return "", err
		}
		for _, e := range page.Entities {
			vals = append(vals, azValue(e))
		}
	}
	switch len(vals) {
	case 0:
		return "", errNotFound
	case 1:
		return vals[0], nil
	}
	return "", fmt.Errorf("query for one key returned %d entities: %q", len(vals), vals)
}

func (a *cohAzKV) all(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	pager := a.tc.NewListEntitiesPager(nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, e := range page.Entities {
			var m map[string]any
			if err := json.Unmarshal(e, &m); err != nil {
				return nil, err
			}
			out[fmt.Sprintf("%v/%v", m["PartitionKey"], m["RowKey"])] = azValue(e)
		}
	}
	return out, nil
}

func (a *cohAzKV) timer() *rpcTimer { return nil }

var errNotFound = errors.New("not found")

func (a *cohAzKV) insert(ctx context.Context, key, val string) (string, error) {
	resp, err := a.tc.AddEntity(ctx, cohAzEntity(key, val), nil)
	return string(resp.ETag), err
}

func (a *cohAzKV) upsert(ctx context.Context, key, val string) (string, error) {
	resp, err := a.tc.UpsertEntity(ctx, cohAzEntity(key, val), &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace})
	return string(resp.ETag), err
}

func (a *cohAzKV) update(ctx context.Context, key, val, etag string) (string, error) {
	o := &aztables.UpdateEntityOptions{UpdateMode: aztables.UpdateModeReplace}
	if etag != "" {
		e := azcore.ETag(etag)
		o.IfMatch = &e
	}
	resp, err := a.tc.UpdateEntity(ctx, cohAzEntity(key, val), o)
	return string(resp.ETag), err
}

func (a *cohAzKV) del(ctx context.Context, key, etag string) error {
	pk, rk := splitKey(key)
	var o *aztables.DeleteEntityOptions
	if etag != "" {
		e := azcore.ETag(etag)
		o = &aztables.DeleteEntityOptions{IfMatch: &e}
	}
	_, err := a.tc.DeleteEntity(ctx, pk, rk, o)
	return err
}

func (a *cohAzKV) rmw(ctx context.Context, key string, f func(string, bool) string) (string, error) {
	old, etag, err := a.get(ctx, key)
	if a.classify(err) == stNotFound {
		return a.insert(ctx, key, f("", false))
	}
	if err != nil {
		return "", err
	}
	return a.update(ctx, key, f(old, true), etag)
}

func (a *cohAzKV) pair(ctx context.Context, key1, val1, key2, val2 string, mode int, etag2 string) error {
	acts := []aztables.TransactionAction{{ActionType: aztables.TransactionTypeInsertReplace, Entity: cohAzEntity(key1, val1)}}
	second := aztables.TransactionAction{Entity: cohAzEntity(key2, val2)}
	if etag2 != "" {
		e := azcore.ETag(etag2)
		second.IfMatch = &e
	}
	switch mode {
	case pairUpsert:
		second.ActionType, second.IfMatch = aztables.TransactionTypeInsertReplace, nil
	case pairInsert:
		second.ActionType, second.IfMatch = aztables.TransactionTypeAdd, nil
	case pairUpdate:
		second.ActionType = aztables.TransactionTypeUpdateReplace
	case pairDelete:
		pk, rk := splitKey(key2)
		second.ActionType, second.Entity = aztables.TransactionTypeDelete, []byte(fmt.Sprintf(`{"PartitionKey":%q,"RowKey":%q}`, pk, rk))
	}
	_, err := a.tc.SubmitTransaction(ctx, append(acts, second), nil)
	return err
}

func (a *cohAzKV) classify(err error) string {
	if err == nil {
		return stOK
	}
	if errors.Is(err, errNotFound) {
		return stNotFound
	}
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		switch re.StatusCode {
		case 409:
			if re.ErrorCode == "EntityAlreadyExists" {
				return stExists
			}
		case 412:
			return stPrecond
		case 404:
			return stNotFound
		case 202:
			// The SDK's error for a $batch answered 202 whose
			// operation failed: the whole batch was refused.
			return stRefused
		}
	}
	return stAmbiguous
}

// ---- Datastore ----

type cohDsKV struct {
	label string
	c     *datastore.Client
	ns    string
	kind  string
	rt    *rpcTimer // the client's stats handler, if any
}

func (d *cohDsKV) timer() *rpcTimer { return d.rt }

type dsEntity struct{ V string }

// dsClient is a Go Datastore client of addr over plaintext gRPC, as
// DATASTORE_EMULATOR_HOST sets one up; opts add to its options.
func dsClient(t *testing.T, project, addr string, opts ...option.ClientOption) *datastore.Client {
	t.Helper()
	c, err := datastore.NewClient(context.Background(), project, append([]option.ClientOption{
		option.WithEndpoint("passthrough:///" + addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials()))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (d *cohDsKV) key(key string) *datastore.Key {
	k := datastore.NameKey(d.kind, key, nil)
	k.Namespace = d.ns
	return k
}

func (d *cohDsKV) name() string { return d.label }

func (d *cohDsKV) get(ctx context.Context, key string) (string, string, error) {
	var e dsEntity
	err := d.c.Get(ctx, d.key(key), &e)
	return e.V, "", err
}

func (d *cohDsKV) query(ctx context.Context, key string) (string, error) {
	q := datastore.NewQuery(d.kind).Namespace(d.ns).FilterField("__key__", "=", d.key(key))
	var vals []string
	it := d.c.Run(ctx, q)
	for {
		var e dsEntity
		_, err := it.Next(&e)
		if err == iterator.Done {
			break
		}
		if err != nil {
			return "", err
		}
		vals = append(vals, e.V)
	}
	switch len(vals) {
	case 0:
		return "", errNotFound
	case 1:
		return vals[0], nil
	}
	return "", fmt.Errorf("query for one key returned %d entities: %q", len(vals), vals)
}

func (d *cohDsKV) all(ctx context.Context) (map[string]string, error) {
	var ents []dsEntity
	keys, err := d.c.GetAll(ctx, datastore.NewQuery(d.kind).Namespace(d.ns), &ents)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(keys))
	for i, k := range keys {
		out[k.Name] = ents[i].V
	}
	return out, nil
}

func (d *cohDsKV) insert(ctx context.Context, key, val string) (string, error) {
	_, err := d.c.Mutate(ctx, datastore.NewInsert(d.key(key), &dsEntity{V: val}))
	return "", err
}

func (d *cohDsKV) upsert(ctx context.Context, key, val string) (string, error) {
	_, err := d.c.Put(ctx, d.key(key), &dsEntity{V: val})
	return "", err
}

func (d *cohDsKV) update(ctx context.Context, key, val, _ string) (string, error) {
	_, err := d.c.Mutate(ctx, datastore.NewUpdate(d.key(key), &dsEntity{V: val}))
	return "", err
}

func (d *cohDsKV) del(ctx context.Context, key, _ string) error {
	return d.c.Delete(ctx, d.key(key))
}

func (d *cohDsKV) rmw(ctx context.Context, key string, f func(string, bool) string) (string, error) {
	_, err := d.c.RunInTransaction(ctx, func(tx *datastore.Transaction) error {
		var e dsEntity
		err := tx.Get(d.key(key), &e)
		if err != nil && err != datastore.ErrNoSuchEntity {
			return err
		}
		_, err = tx.Put(d.key(key), &dsEntity{V: f(e.V, err == nil)})
		return err
	}, datastore.MaxAttempts(10))
	return "", err
}

var errPairRefused = errors.New("pair refused: key2's precondition does not hold")

func (d *cohDsKV) pair(ctx context.Context, key1, val1, key2, val2 string, mode int, _ string) error {
	_, err := d.c.RunInTransaction(ctx, func(tx *datastore.Transaction) error {
		var e dsEntity
		err := tx.Get(d.key(key2), &e)
		if err != nil && err != datastore.ErrNoSuchEntity {
			return err
		}
		exists := err == nil
		if (mode == pairInsert && exists) || (mode == pairUpdate && !exists) {
			return errPairRefused
		}
		if _, err := tx.Put(d.key(key1), &dsEntity{V: val1}); err != nil {
			return err
		}
		if mode == pairDelete {
			return tx.Delete(d.key(key2))
		}
		_, err = tx.Put(d.key(key2), &dsEntity{V: val2})
		return err
	}, datastore.MaxAttempts(10))
	return err
}

func (d *cohDsKV) classify(err error) string {
	switch {
	case err == nil:
		return stOK
	case errors.Is(err, errPairRefused):
		return stRefused
	case errors.Is(err, datastore.ErrNoSuchEntity), errors.Is(err, errNotFound):
		return stNotFound
	case errors.Is(err, datastore.ErrConcurrentTransaction):
		return stAborted
	}
	switch status.Code(err) {
	case codes.AlreadyExists:
		return stExists
	case codes.NotFound:
		return stNotFound
	case codes.FailedPrecondition:
		return stPrecond
	case codes.Aborted:
		return stAborted
	}
	return stAmbiguous
}
